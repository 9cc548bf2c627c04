"""The programs built on the library: the ``nnburst`` command (:mod:`.cli`), the
driver service's command line (:mod:`.serve`), ``nnburst stress``
(:mod:`.stress`), ``nnburst bench`` (:mod:`.benchmarks`) and the trace
summary (:mod:`.trace_summary`).

They sit above every layer of the library, and the library never imports
them (the import-linter contract in pyproject.toml).
"""
