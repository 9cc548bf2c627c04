"""CPU reference operations, one family per module.

Every module here is imported by :mod:`nnburst.cpu.registry` and registers its
operations with :func:`~nnburst.cpu.registry.register`.
"""
