/* How much freed memory malloc keeps: the mechanism behind the CPU
 * driver's "keep freed buffers" policy (nnburst/cpu/heap.py).
 *
 * An execution allocates the same intermediate tensors on every run.
 * glibc hands blocks over its mmap threshold (128 KiB, then adaptive) back
 * to the kernel on free, and trims the heap top past its trim threshold, so
 * each run faults those pages in again: a third of a small vision model's
 * time.  Raising both thresholds keeps the blocks in the heap, reused by the
 * next run; the process holds at most its peak. */

#include <errno.h>
#include <limits.h>
#include <stdint.h>

#include "kernels.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

int nnb_keep_freed_memory(int64_t mmap_threshold, int64_t trim_threshold) {
    if (mmap_threshold < 0 || mmap_threshold > INT_MAX || trim_threshold < 0 ||
        trim_threshold > INT_MAX)
        return -EINVAL;
#ifdef __GLIBC__
    /* mallopt returns 1 on success, 0 for a value it refuses. */
    if (mallopt(M_MMAP_THRESHOLD, (int)mmap_threshold) != 1) return -EINVAL;
    if (mallopt(M_TRIM_THRESHOLD, (int)trim_threshold) != 1) return -EINVAL;
    return 0;
#else
    return -ENOSYS;
#endif
}
