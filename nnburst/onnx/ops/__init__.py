"""ONNX operator mappers, one module per operator family.

Each mapper registers itself in :data:`nnburst.onnx.converter.MAPPERS` as its
module loads; :mod:`nnburst.onnx.convert` imports every family.  A new
operator goes in its family's module (or a new family imported there);
:mod:`.building` holds what several families build with.
"""
