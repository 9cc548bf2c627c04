/* Event flag: a sticky 32-bit bitset on a shared futex word.
 *
 * The word is a doorbell, never a data channel: wake() sets bits and rings
 * the futex only when a bit was newly set (a pending, unconsumed bit means
 * nobody has gone to sleep on it since); wait() consumes the bits it asked
 * for.  The futex is not FUTEX_PRIVATE because the word is shared between
 * processes.  The teardown bit is never consumed by a wait that did not ask
 * for it, so once set it wakes every current and future waiter.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fmq_internal.h"

int64_t nnb_monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts, uint32_t bits) {
    return syscall(SYS_futex, word, op, val, ts, NULL, bits);
}

int nnb_evflag_wake(uint32_t *word, uint32_t bits) {
    if (word == NULL || ((uintptr_t)word & 3) != 0 || bits == 0) return -EINVAL;
    /* Fast path: when every bit is already pending nobody has consumed it,
     * so nobody sleeps on it: skip the locked RMW, which would bounce the
     * word's cache line between the two cores on every message.  The
     * seq_cst fence pairs with the waiter's seq_cst fetch_and (S3): either
     * the waiter's fetch_and comes first in the total order and our load
     * sees the bit cleared (we take the slow path), or our fence comes
     * first and the waiter's re-check after consuming the bit sees the data
     * we published before calling wake (the release store of w, S1). */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if ((__atomic_load_n(word, __ATOMIC_RELAXED) & bits) == bits) return 0;
    /* S3: seq_cst RMW; a waiter's fetch_and either sees our bits or its
     * futex compare fails, so no wake-up is lost. */
    uint32_t old = __atomic_fetch_or(word, bits, __ATOMIC_SEQ_CST);
    if ((~old & bits) == 0) return 0; /* all already pending: no sleeper to wake */
    if (futex(word, FUTEX_WAKE_BITSET, INT_MAX, NULL, bits) == -1) return -errno;
    return 0;
}

/* One attempt.  0 with *seen set: bits consumed.  -EAGAIN: nothing yet (the
 * word changed, or a spurious wake), try again.  -ETIMEDOUT, -EINTR (signal),
 * -EPIPE (teardown). */
int nnb_evflag_wait_once(uint32_t *word, uint32_t bits, int64_t deadline_ns, uint32_t *seen) {
    uint32_t teardown = NNB_EF_TEARDOWN & ~bits;
    *seen = 0;
    /* S3: consume pending bits without a syscall. */
    uint32_t old = __atomic_fetch_and(word, ~bits, __ATOMIC_SEQ_CST);
    if (old & bits) {
        *seen = old & bits;
        return 0; /* a pending bit wins over an expired deadline */
    }
    if (old & teardown) return -EPIPE;
    struct timespec ts, *timeout = NULL;
    if (deadline_ns >= 0) {
        if (nnb_monotonic_ns() >= deadline_ns) return -ETIMEDOUT;
        ts.tv_sec = deadline_ns / 1000000000;
        ts.tv_nsec = deadline_ns % 1000000000;
        timeout = &ts; /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time */
    }
    if (futex(word, FUTEX_WAIT_BITSET, old & ~bits, timeout, bits | teardown) == -1) {
        if (errno == EAGAIN) return -EAGAIN; /* the word changed before we slept */
        return -errno;                       /* ETIMEDOUT, EINTR */
    }
    old = __atomic_fetch_and(word, ~bits, __ATOMIC_SEQ_CST); /* S3 */
    if (old & bits) {
        *seen = old & bits;
        return 0;
    }
    if (old & teardown) return -EPIPE;
    return -EAGAIN; /* woken for a bit another waiter consumed */
}

int nnb_evflag_wait(uint32_t *word, uint32_t bits, int64_t deadline_ns, int retry, uint32_t *seen) {
    if (word == NULL || ((uintptr_t)word & 3) != 0 || bits == 0 || seen == NULL) return -EINVAL;
    for (;;) {
        int rc = nnb_evflag_wait_once(word, bits, deadline_ns, seen);
        if (rc != -EAGAIN || !retry) return rc;
    }
}
