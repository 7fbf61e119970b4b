"""Benchmarks of function-cluster-plugin (issue 5): ``python -m benchmarks``."""
