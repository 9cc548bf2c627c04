"""TFLite operator mappers, one module per operator family.

Each mapper registers itself in :data:`nnburst.tflite.converter.MAPPERS` as
its module loads; :mod:`nnburst.tflite.convert` imports every family.  A new
operator goes in its family's module (or a new family imported there).
"""
