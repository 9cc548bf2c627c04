"""One thread for the CPU driver's kernels, in an app's process as in a service.

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

The C plan's own kernels (convolutions, depthwise, fully connected) run on
the caller's thread too, for the same reasons: a burst server shares a small
machine's two cores with its client, and the peers are measured on one
thread.  More is an option: ``NNBURST_THREADS`` (default 1; 0 means the
default) for the process, a driver service's ``--threads``, and per model
``Interpreter(num_threads=N)`` or ``SessionOptions.intra_op_num_threads``
(through :func:`asked`).  A plan built with N > 1 splits each convolution of
at least :data:`MIN_WORK` multiply-adds by output rows over N threads, the
caller one of them (``csrc/threadpool.c``); the results are the same bits
as on one thread.  The workers exist while someone holds a count above one
(:func:`hold`): the process's default for its life, a facade's until it
closes.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import operator
import os
import threading
from collections.abc import Iterator

import threadpoolctl

from .._bindings.threadpool import MAX_THREADS, Hold
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


# -- the C plan's kernel threads ------------------------------------------------

THREADS_ENV = "NNBURST_THREADS"
#: Kernel threads when nothing asks for more (see the module's docstring).
DEFAULT_THREADS = 1
#: The smallest convolution (multiply-adds) split across threads.  Below
#: ~300k (~10 us of float 3x3 conv here) the caller had taken every slice
#: before a woken worker started (a split step's median equalled one
#: thread's, 18k-295k multiply-adds, 2-core VM at load ~8), so a split would
#: only add the wake-up.
MIN_WORK = 400_000
#: Runs of rows a split step is cut into per thread, taken one at a time.
SLICES = 1

#: The count a facade asked for while its model is prepared (None: the default).
_asked: contextvars.ContextVar[int | None] = contextvars.ContextVar("nnburst_threads", default=None)
_process_lock = threading.Lock()
#: The process's default (NNBURST_THREADS or a service's --threads) once applied.
_process: int | None = None
_process_hold: Hold | None = None


def checked_threads(value: object, option: str) -> int:
    """``value`` as a kernel thread count (0 and None: the default), or a
    BadDataError naming ``option``."""
    if value is None:
        return 0
    count: int | None = None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            count = int(value.strip())
    elif not isinstance(value, bool):
        with contextlib.suppress(TypeError):
            count = operator.index(value)  # type: ignore[arg-type]
    if count is None or not 0 <= count <= MAX_THREADS:
        raise BadDataError(
            f"{option} must be a thread count from 0 (the default, {DEFAULT_THREADS}) to "
            f"{MAX_THREADS}, got {value!r}"
        )
    return count


def configured_threads() -> int:
    """The count ``NNBURST_THREADS`` asks for (unset or 0: the default)."""
    text = os.environ.get(THREADS_ENV, "").strip()
    return checked_threads(text, THREADS_ENV) if text else 0


def set_process_threads(count: int | None = None) -> int:
    """Apply the process's default once (a service's ``--threads``, else
    ``NNBURST_THREADS``); returns it.  Later calls return what the first applied."""
    global _process, _process_hold
    with _process_lock:
        if _process is None:
            wanted = configured_threads() if count is None else checked_threads(count, "--threads")
            _process = wanted or DEFAULT_THREADS
            if _process > 1:
                _process_hold = Hold(_process)  # for the process's life
                logger.debug("kernel threads: %d by default", _process)
        return _process


@contextlib.contextmanager
def asked(count: int | None, option: str = "threads") -> Iterator[int]:
    """While preparing a model in this context, its plans use ``count`` kernel
    threads (0 or None: the process's default), held until the returned
    hold is released (the facade does it when it closes)."""
    wanted = checked_threads(count, option)
    token = _asked.set(wanted or None)
    try:
        yield wanted
    finally:
        _asked.reset(token)


def hold(count: int | None, option: str = "threads") -> Hold | None:
    """Workers for ``count`` threads until the hold is released; None when
    ``count`` asks for no more than the default does."""
    wanted = checked_threads(count, option)
    return Hold(wanted) if wanted > 1 else None


def plan_threads() -> int:
    """The kernel threads a plan being built now should use."""
    default = set_process_threads()
    return _asked.get() or default
