"""The binding layer: the only caller of the compiled ``nnburst._native``.

Typed wrappers for the C contracts of ``csrc/``, one module each:

* :mod:`.status` (``status.h``): every C status through one table,
  :func:`error_for`, into an ``NNError`` subclass;
* :mod:`.queue` (``fmq.h``): the queue (:class:`QueueHandle`,
  :class:`RoundTrip`) and its event flag (:class:`EventWord`);
* :mod:`.kernels` (``kernels.h``): the CPU driver's loops
  (:class:`ConvKernel`, :class:`Requantize`, one-shot functions).

:mod:`.compiled` alone imports the compiled module; no module outside this
package names its ``ffi``/``lib`` (ruff TID251).  A deadline is
``int | None`` (absolute ``time.monotonic_ns()``, see ``nnburst/deadlines.py``)
everywhere above; :mod:`.queue` turns None into C's sentinel.

Hot paths (a burst's round trip is a few µs): C functions are bound once to
module globals or to a prepared object, a wrapper returns on the success
test before anything else, and errors are built only when they happen.
"""

from typing import TYPE_CHECKING

from .kernels import (
    CONV_AVX2,
    CONV_AVX512,
    CONV_BEST,
    CONV_PORTABLE,
    OUT_TYPES,
    POOL_MAX,
    POOL_SUM,
    QUANT_ADD,
    QUANT_MUL,
    ConvKernel,
    Requantize,
    add_padded_channels_f32,
    keep_freed_memory,
    pool_f32,
    quant_binary_lookup,
    quant_binary_table,
    quantize_f32,
    softmax_quant8,
    window_shape,
)
from .queue import (
    EF_NOT_EMPTY,
    EF_NOT_FULL,
    EF_TEARDOWN,
    FLAVOR_SYNCHRONIZED,
    FLAVOR_UNSYNCHRONIZED,
    HAS_EVFLAG,
    READ_OFFSET,
    RING_OFFSET,
    WRITE_OFFSET,
    EventWord,
    QueueHandle,
    RoundTrip,
    pointer,
    release,
    required_bytes,
)
from .status import error_for

if TYPE_CHECKING:
    from .._native import CData as CData  # the stub's type of a C pointer, for annotations

__all__ = [
    "CONV_AVX2",
    "CONV_AVX512",
    "CONV_BEST",
    "CONV_PORTABLE",
    "EF_NOT_EMPTY",
    "EF_NOT_FULL",
    "EF_TEARDOWN",
    "FLAVOR_SYNCHRONIZED",
    "FLAVOR_UNSYNCHRONIZED",
    "HAS_EVFLAG",
    "OUT_TYPES",
    "POOL_MAX",
    "POOL_SUM",
    "QUANT_ADD",
    "QUANT_MUL",
    "READ_OFFSET",
    "RING_OFFSET",
    "WRITE_OFFSET",
    "ConvKernel",
    "EventWord",
    "QueueHandle",
    "Requantize",
    "RoundTrip",
    "add_padded_channels_f32",
    "error_for",
    "keep_freed_memory",
    "pointer",
    "pool_f32",
    "quant_binary_lookup",
    "quant_binary_table",
    "quantize_f32",
    "release",
    "required_bytes",
    "softmax_quant8",
    "window_shape",
]
