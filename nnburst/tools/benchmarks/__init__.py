"""Benchmarks shared by ``nnburst bench`` and the pytest-benchmark suite in ``bench/``."""
