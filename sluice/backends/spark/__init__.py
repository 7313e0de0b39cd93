"""The Spark backend: registered CQL queries on Spark Structured Streaming through PySpark."""
