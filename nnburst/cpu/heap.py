"""Keep freed tensor buffers in the heap from one execution to the next.

Every execution allocates the same intermediate tensors.  glibc hands large
freed blocks back to the kernel, so the next execution faults the same pages
in again: a third of face_detection_short_range.tflite's compute time on a
2-vCPU VM.  The CPU driver therefore raises malloc's mmap and trim thresholds
once per process (an app's, or a driver service's), when it prepares its
first model; the process then keeps up to its peak heap instead of returning
it.  ``NNBURST_MALLOC=default`` in
the environment leaves malloc as it is.
"""

from __future__ import annotations

import logging
import os

from .._bindings import keep_freed_memory as _keep_freed_memory
from ..errors import NNError

#: Blocks below this come from the heap, not mmap: glibc's ceiling on 64-bit.
MMAP_THRESHOLD = 32 << 20
#: Free memory at the heap's top is returned to the kernel only past this.
TRIM_THRESHOLD = 256 << 20
ENV = "NNBURST_MALLOC"

logger = logging.getLogger("nnburst.cpu")
_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Apply the policy once per process; whether malloc now keeps freed buffers."""
    global _applied
    if _applied is None:
        if os.environ.get(ENV) == "default":
            _applied = False
        else:
            try:
                _keep_freed_memory(MMAP_THRESHOLD, TRIM_THRESHOLD)
                _applied = True
            except NNError as exc:
                _applied = False
                logger.debug("malloc thresholds left as they are (%s)", exc)
    return _applied
