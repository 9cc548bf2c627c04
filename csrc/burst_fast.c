/* A burst's fast paths: see burst_fast.h.
 *
 * Memory ordering (the server's path).  armed and stop are written by other threads (a free
 * of a slot from the client's connection thread, the burst's close) and
 * read here once per request, after the request was read from the queue:
 * stores are release (nnb_burst_fast_*), loads acquire.  A client frees a
 * slot, waits for the acknowledgement, and only then sends a request that
 * may name the slot again; the acknowledgement follows the disarm store,
 * and the request's publication in the queue (release on its write
 * counter, acquire in our read) follows the acknowledgement, so the load
 * after the read sees armed == 0.  Everything else in the struct is written
 * by the burst's worker thread before it calls nnb_burst_fast_serve on the
 * same thread, and nothing changes it while a serve runs; the counters a
 * serve writes (served, spun, waits, waited_ns, missed_ns) are read by the
 * same thread after it returns (tests read them once the worker stopped). */
#include "burst_fast.h"

#include <string.h>

#define WORDS_PER_DATUM 6
#define DATUM_BYTES (WORDS_PER_DATUM * 4)

void nnb_burst_fast_arm(nnb_burst_fast_t *f) { __atomic_store_n(&f->armed, 1, __ATOMIC_RELEASE); }

void nnb_burst_fast_disarm(nnb_burst_fast_t *f) {
    __atomic_store_n(&f->armed, 0, __ATOMIC_RELEASE);
}

void nnb_burst_fast_stop(nnb_burst_fast_t *f) { __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE); }

/* The one call of the plan (its signature is plan.h's to change). */
static int run_plan(const nnb_burst_fast_t *f) {
    return nnb_plan_run(f->steps, f->step_count, f->arena, f->arena_bytes, f->tensors,
                        f->tensor_bytes, f->tensor_count, 0);
}

/* The request in rt->reply is the armed one, and may be served here. */
static int serves(nnb_burst_fast_t *f, const nnb_round_trip_t *rt, uint64_t n) {
    if (__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) return 0;
    if (!__atomic_load_n(&f->armed, __ATOMIC_ACQUIRE)) return 0;
    if (n != f->packet_datums || n > rt->reply_capacity) return 0;
    if (f->result_datums > rt->request_capacity) return 0;
    return memcmp(rt->reply, f->packet, n * DATUM_BYTES) == 0;
}

int64_t nnb_burst_fast_serve(nnb_burst_fast_t *f, nnb_round_trip_t *rt, uint64_t n,
                             int64_t spin_ns, int64_t max_waits) {
    f->waits = f->waited_ns = f->missed_ns = 0;
    for (;;) {
        if (!serves(f, rt, n)) return (int64_t)n;
        int64_t start = f->measure ? nnb_monotonic_ns() : 0;
        if (run_plan(f) != 0) return (int64_t)n; /* Python runs it and reports why */
        int64_t ran = f->measure ? nnb_monotonic_ns() : 0;
        for (int64_t i = 0; i < f->copy_count; i++)
            memcpy(f->copy_to[i], f->copy_from[i], (size_t)f->copy_bytes[i]);
        uint32_t *result = (uint32_t *)rt->request;
        memcpy(result, f->result, f->result_datums * DATUM_BYTES);
        if (f->measure) {
            /* The last datum is executionTiming: on device, in driver (µs, u64 as two words). */
            uint64_t on_device = (uint64_t)(ran - start) / 1000;
            uint64_t in_driver = (uint64_t)(nnb_monotonic_ns() - start) / 1000;
            if (in_driver < on_device) in_driver = on_device;
            uint32_t *timing = result + (f->result_datums - 1) * WORDS_PER_DATUM;
            timing[2] = (uint32_t)on_device;
            timing[3] = (uint32_t)(on_device >> 32);
            timing[4] = (uint32_t)in_driver;
            timing[5] = (uint32_t)(in_driver >> 32);
        }
        f->served++;
        /* Timed for the policy, unless it never spins (no window, no limit). */
        int timed = spin_ns > 0 || max_waits > 0;
        int64_t waited = timed ? nnb_monotonic_ns() : 0;
        int64_t got = nnb_fmq_round_trip(rt, f->result_datums, -1, spin_ns);
        if (got <= 0) return got;
        n = (uint64_t)got;
        waited = timed ? nnb_monotonic_ns() - waited : 0;
        if (timed && waited <= 0) waited = 1;
        f->waits++;
        f->waited_ns += waited;
        if (spin_ns > 0 && waited > spin_ns) {
            f->missed_ns = waited;
            return (int64_t)n;
        }
        if (spin_ns > 0) f->spun++;
        if (max_waits > 0 && f->waits >= max_waits) return (int64_t)n;
    }
}

/* The client's path.  Memory ordering: the inputs are copied into the
 * staging memory before nnb_fmq_round_trip publishes the request (release
 * store of the request queue's write counter; the server's read acquires
 * it), and the outputs are copied out after the answer was read (the
 * server wrote them before its release store of the result queue's write
 * counter, which the read acquires).  The staging memory is a sealed memfd
 * this process created: the server cannot shrink it under these copies,
 * whose bounds were checked against it when the struct was filled. */
int64_t nnb_burst_repeat(nnb_burst_repeat_t *r, int64_t deadline_ns) {
    r->same = 0;
    if (deadline_ns == 0) deadline_ns = nnb_monotonic_ns() + r->wait_limit_ns;
    r->deadline_ns = deadline_ns;
    for (int64_t i = 0; i < r->in_count; i++)
        memcpy(r->in_to[i], r->in_from[i], (size_t)r->in_bytes[i]);
    /* Timed for the policy, unless it never spins (no window, no limit). */
    int timed = r->spin_ns > 0 || r->max_waits > 0;
    int64_t start = timed ? nnb_monotonic_ns() : 0;
    int64_t got = nnb_fmq_round_trip(r->rt, r->packet_datums, deadline_ns, r->spin_ns);
    if (got <= 0) return got;
    if (timed) {
        int64_t waited = nnb_monotonic_ns() - start;
        if (waited <= 0) waited = 1;
        r->waits++;
        r->waited_ns += waited;
        if (r->spin_ns > 0 && waited > r->spin_ns) {
            r->missed_ns = waited;
            r->due = 1;
        } else if (r->max_waits > 0 && r->waits >= r->max_waits) {
            r->due = 1;
        }
    }
    if ((uint64_t)got != r->result_datums) return got;
    if (memcmp(r->rt->reply, r->result, r->result_datums * DATUM_BYTES) != 0) return got;
    for (int64_t i = 0; i < r->out_count; i++)
        memcpy(r->out_to[i], r->out_from[i], (size_t)r->out_bytes[i]);
    r->same = 1;
    r->answered++;
    return r->due ? got : NNB_REPEAT_ANSWERED;
}
