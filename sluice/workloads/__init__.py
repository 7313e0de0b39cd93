"""Workload generators: bursty arrivals (Pareto ON/OFF), trace replay."""
