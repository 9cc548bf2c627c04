"""One BLAS thread for the CPU driver's kernels, in an app's process as in a service.

The convolutions and fully connected layers run their sums through numpy's
BLAS, which by default starts one thread per core.  On a small machine
those threads fight every other busy process: beside two processes running
numpy matrix products, face_detection_short_range.tflite's in-process p50
went from 1.5 ms to 9.6-10 ms in its slowest windows with every core, and
stayed at 1.6-1.8 ms with one.  The models this driver runs are small
enough that a second thread rarely pays for its hand-offs, and the peers
nnburst is measured against (LiteRT, onnxruntime) run on one thread too.

So, as :mod:`.heap` does for malloc, the CPU driver sets the policy once per
process when it prepares its first model: ``NNBURST_BLAS_THREADS`` (default
1) threads for BLAS, process-wide, numpy's other callers included.
``NNBURST_BLAS_THREADS=0`` leaves BLAS as the process set it (numpy's
default, or the app's own ``threadpoolctl`` limit); a driver service takes
its ``--blas-threads`` option instead (same meaning).
"""

from __future__ import annotations

import logging
import os

import threadpoolctl

from ..errors import BadDataError

ENV = "NNBURST_BLAS_THREADS"
#: Threads numpy's BLAS may use when ``NNBURST_BLAS_THREADS`` is not set.
DEFAULT_BLAS_THREADS = 1

logger = logging.getLogger("nnburst.cpu")
#: The thread count applied in this process (0: BLAS left alone), None until then.
_applied: int | None = None


def configured_blas_threads() -> int:
    """The count ``NNBURST_BLAS_THREADS`` asks for (0: leave BLAS alone)."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_BLAS_THREADS
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise BadDataError(f"{ENV} must be a thread count of 0 or more, got {text!r}")
    return count


def limit_blas_threads(count: int | None = None) -> int:
    """Apply the policy once per process; returns the count in force (0: not limited).

    ``count`` (a service's ``--blas-threads``) overrides the environment.  The
    first call decides: later ones return what it applied, so a service's
    option is not undone by the driver preparing its models."""
    global _applied
    if _applied is None:
        wanted = configured_blas_threads() if count is None else count
        if wanted:
            # Process-wide, for the process's life: the returned limiter is not kept.
            threadpoolctl.threadpool_limits(limits=wanted, user_api="blas")
            logger.debug("numpy's BLAS limited to %d thread(s)", wanted)
        _applied = wanted
    return _applied
