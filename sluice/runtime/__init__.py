"""The embedded runtime: columnar batches, queues, synopses, operators (seed §3)."""
