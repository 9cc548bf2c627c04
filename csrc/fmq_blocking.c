/* Blocking reads and writes: try, spin for a bounded window, then sleep on
 * the peer's event-flag bit; re-check after every wake; stop at the
 * deadline, on a signal (-EINTR, so the caller can run its handlers) or when
 * the teardown bit is set (-EPIPE). */
#define _GNU_SOURCE
#include <sched.h>

#include "fmq_internal.h"

/* Spin in batches of this many CPU pauses between clock reads. */
#define SPIN_BATCH 32
/* After this long spinning, yield between batches: on 2 vCPUs the peer may
 * be runnable on our CPU, and burning the slice only delays it. */
#define SPIN_YIELD_AFTER_NS 20000

static int teardown_pending(const nnb_fmq_t *q) {
    return (__atomic_load_n(q->evflag, __ATOMIC_ACQUIRE) & NNB_EF_TEARDOWN) != 0;
}

/* Would a blocked writer (or reader) of n elements now succeed?  Errors
 * (corruption) count as "ready" so the retry reports them. */
static int ready(nnb_fmq_t *q, int writer, uint64_t n) {
    int64_t avail = writer ? nnb_fmq_writable(q) : nnb_fmq_readable(q);
    return avail < 0 || (uint64_t)avail >= n;
}

static int spin(nnb_fmq_t *q, int writer, uint64_t n, int64_t spin_ns) {
    int64_t start = nnb_monotonic_ns();
    for (;;) {
        for (int i = 0; i < SPIN_BATCH; i++) {
            if (ready(q, writer, n)) return 0;
            nnb_cpu_relax();
        }
        if (teardown_pending(q)) return -EPIPE;
        int64_t spent = nnb_monotonic_ns() - start;
        if (spent >= spin_ns) return -EAGAIN;
        if (spent >= SPIN_YIELD_AFTER_NS) sched_yield();
    }
}

typedef struct {
    nnb_fmq_t *q;
    int writer;
    uint64_t n;          /* elements the attempt needs */
    uint32_t wait_bit;   /* the bit the peer rings when it makes progress */
    int64_t deadline_ns;
    int64_t spin_ns;     /* remaining spin budget; spent once */
} waiter_t;

/* Block until worth retrying (0), or fail. */
static int wait_for_peer(waiter_t *w) {
    if (teardown_pending(w->q)) return -EPIPE;
    if (w->spin_ns > 0) {
        int64_t budget = w->spin_ns;
        w->spin_ns = 0;
        int rc = spin(w->q, w->writer, w->n, budget);
        if (rc != -EAGAIN) return rc;
    }
    uint32_t seen;
    int rc = nnb_evflag_wait_once(w->q->evflag, w->wait_bit, w->deadline_ns, &seen);
    return rc == -EAGAIN ? 0 : rc;
}

static int check_blocking(nnb_fmq_t *q, uint64_t n, uint32_t wait_bit) {
    if (q->flavor != NNB_FLAVOR_SYNCHRONIZED || q->evflag == NULL) return -EINVAL;
    if (wait_bit == 0 || n > q->count) return -EINVAL;
    return 0;
}

static void wake_peer(nnb_fmq_t *q, uint32_t bit) {
    if (bit) nnb_evflag_wake(q->evflag, bit);
}

static int write_blocking(nnb_fmq_t *q, const void *src, uint64_t n, uint32_t read_notification,
                           uint32_t write_notification, int64_t deadline_ns, int64_t spin_ns) {
    int rc = check_blocking(q, n, read_notification);
    if (rc) return rc;
    if (src == NULL && n) return -EINVAL;
    waiter_t w = {q, 1, n, read_notification, deadline_ns, spin_ns};
    for (;;) {
        rc = nnb_fmq_try_write(q, src, n);
        if (rc == 0) {
            wake_peer(q, write_notification);
            return 0;
        }
        if (rc != -EAGAIN) return rc;
        rc = wait_for_peer(&w);
        if (rc == -ETIMEDOUT) {
            /* Space may have appeared just as time ran out. */
            if (nnb_fmq_try_write(q, src, n) == 0) {
                wake_peer(q, write_notification);
                return 0;
            }
        }
        if (rc) return rc;
    }
}

static int read_blocking(nnb_fmq_t *q, void *dst, uint64_t n, uint32_t read_notification,
                          uint32_t write_notification, int64_t deadline_ns, int64_t spin_ns) {
    int rc = check_blocking(q, n, write_notification);
    if (rc) return rc;
    if (dst == NULL && n) return -EINVAL;
    waiter_t w = {q, 0, n, write_notification, deadline_ns, spin_ns};
    for (;;) {
        rc = nnb_fmq_try_read(q, dst, n);
        if (rc == 0) {
            wake_peer(q, read_notification);
            return 0;
        }
        if (rc != -EAGAIN) return rc;
        rc = wait_for_peer(&w);
        if (rc == -ETIMEDOUT) {
            if (nnb_fmq_try_read(q, dst, n) == 0) {
                wake_peer(q, read_notification);
                return 0;
            }
        }
        if (rc) return rc;
    }
}

static int64_t read_available_blocking(nnb_fmq_t *q, void *dst, uint64_t max_n,
                                        uint32_t read_notification, uint32_t write_notification,
                                        int64_t deadline_ns, int64_t spin_ns) {
    int rc = check_blocking(q, 1, write_notification);
    if (rc) return rc;
    if (dst == NULL || max_n == 0) return -EINVAL;
    waiter_t w = {q, 0, 1, write_notification, deadline_ns, spin_ns};
    for (;;) {
        int64_t avail = nnb_fmq_readable(q);
        if (avail < 0) return avail;
        if (avail > 0) {
            uint64_t n = (uint64_t)avail < max_n ? (uint64_t)avail : max_n;
            rc = nnb_fmq_try_read(q, dst, n);
            if (rc) return rc;
            wake_peer(q, read_notification);
            return (int64_t)n;
        }
        rc = wait_for_peer(&w);
        if (rc == -ETIMEDOUT && nnb_fmq_readable(q) > 0) continue;
        if (rc) return rc;
    }
}

/* Public entry points, guarded as in fmq.c. */

int nnb_fmq_write_blocking(nnb_fmq_t *q, const void *src, uint64_t n, uint32_t read_notification,
                           uint32_t write_notification, int64_t deadline_ns, int64_t spin_ns) {
    int rc = nnb_enter(q);
    if (rc) return rc;
    rc = write_blocking(q, src, n, read_notification, write_notification, deadline_ns, spin_ns);
    nnb_leave(q);
    return rc;
}

int nnb_fmq_read_blocking(nnb_fmq_t *q, void *dst, uint64_t n, uint32_t read_notification,
                          uint32_t write_notification, int64_t deadline_ns, int64_t spin_ns) {
    int rc = nnb_enter(q);
    if (rc) return rc;
    rc = read_blocking(q, dst, n, read_notification, write_notification, deadline_ns, spin_ns);
    nnb_leave(q);
    return rc;
}

int64_t nnb_fmq_read_available_blocking(nnb_fmq_t *q, void *dst, uint64_t max_n,
                                        uint32_t read_notification, uint32_t write_notification,
                                        int64_t deadline_ns, int64_t spin_ns) {
    int64_t rc = nnb_enter(q);
    if (rc) return rc;
    rc = read_available_blocking(q, dst, max_n, read_notification, write_notification, deadline_ns,
                                 spin_ns);
    nnb_leave(q);
    return rc;
}

int64_t nnb_fmq_round_trip(nnb_round_trip_t *rt, uint64_t n, int64_t deadline_ns,
                           int64_t spin_ns) {
    rt->wrote = 0;
    if (n > rt->request_capacity) return -EINVAL;
    int64_t rc = nnb_enter(rt->requests);
    if (rc) return rc;
    rc = nnb_enter(rt->replies);
    if (rc) {
        nnb_leave(rt->requests);
        return rc;
    }
    rc = write_blocking(rt->requests, rt->request, n, NNB_EF_NOT_FULL, NNB_EF_NOT_EMPTY,
                        deadline_ns, spin_ns);
    if (rc == 0) {
        rt->wrote = 1;
        rc = read_available_blocking(rt->replies, rt->reply, rt->reply_capacity, NNB_EF_NOT_FULL,
                                     NNB_EF_NOT_EMPTY, deadline_ns, spin_ns);
    }
    nnb_leave(rt->replies);
    nnb_leave(rt->requests);
    return rc;
}
