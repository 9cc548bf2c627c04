"""Benchmark fixtures: peers in their own processes, started once per module.

Run with ``tox -e bench`` (numbers) or ``pytest bench --benchmark-disable``
(a smoke pass that every benchmark still works, as CI does).
"""
