/*
 * nnburst C core: the status every C function returns, shared by the
 * queue's contract (fmq.h) and the kernels' (kernels.h).
 *
 * 0 is success; a failure is a negative errno, and only these:
 *
 *   -EAGAIN     would block (not enough data or space)
 *   -ETIMEDOUT  the deadline passed
 *   -EINTR      a signal arrived; the caller checks signals and retries
 *   -EINVAL     bad argument (count larger than the ring, wrong flavor, a
 *               window outside its input, ...)
 *   -EPROTO     the shared header or counters are corrupt (hostile peer)
 *   -EOVERFLOW  unsynchronized reader was overrun; it resumed at the newest half
 *   -EPIPE      the teardown bit is set: the queue is being closed
 *   -EBADF      this handle was shut down (nnb_fmq_shutdown) by its owner
 *   -ENOTSUP    this CPU or build has not got the loop asked for (kernels)
 *   -ENOMEM     a kernel's scratch memory could not be had
 *   -ENOSYS     this C library has not got the call (nnb_keep_freed_memory)
 *
 * nnburst/_bindings/status.py turns each into one exception, in one table.
 */
#ifndef NNBURST_STATUS_H
#define NNBURST_STATUS_H

#include <errno.h>

/* cffi cdef begin */
#define NNB_EAGAIN -11
#define NNB_ETIMEDOUT -110
#define NNB_EINTR -4
#define NNB_EINVAL -22
#define NNB_EPROTO -71
#define NNB_EOVERFLOW -75
#define NNB_EPIPE -32
#define NNB_EBADF -9
#define NNB_ENOTSUP -95
#define NNB_ENOMEM -12
#define NNB_ENOSYS -38
/* cffi cdef end */

/* The cdef's values are Linux's: checked against this C library's. */
_Static_assert(NNB_EAGAIN == -EAGAIN, "errno values differ from the cdef");
_Static_assert(NNB_ETIMEDOUT == -ETIMEDOUT, "errno values differ from the cdef");
_Static_assert(NNB_EINTR == -EINTR, "errno values differ from the cdef");
_Static_assert(NNB_EINVAL == -EINVAL, "errno values differ from the cdef");
_Static_assert(NNB_EPROTO == -EPROTO, "errno values differ from the cdef");
_Static_assert(NNB_EOVERFLOW == -EOVERFLOW, "errno values differ from the cdef");
_Static_assert(NNB_EPIPE == -EPIPE, "errno values differ from the cdef");
_Static_assert(NNB_EBADF == -EBADF, "errno values differ from the cdef");
_Static_assert(NNB_ENOTSUP == -ENOTSUP, "errno values differ from the cdef");
_Static_assert(NNB_ENOMEM == -ENOMEM, "errno values differ from the cdef");
_Static_assert(NNB_ENOSYS == -ENOSYS, "errno values differ from the cdef");

#endif /* NNBURST_STATUS_H */
