/* A burst's fast paths, both ends (burst_fast.c; bound by
 * nnburst/_bindings/burst_fast.py).  The server's is armed by
 * nnburst/hal/burst_server.py, the client's by nnburst/hal/burst_controller.py.
 *
 * A burst mostly repeats one request: the same packet bytes (slots,
 * offsets, lengths, shapes, measure flag).  Once the Python server has
 * served such a packet and validated it (pool bounds, shapes, the plan
 * covering the whole model), it arms this struct with the packet's bytes,
 * the result packet it answered, and the C plan bound to pointers into the
 * cached pools.  nnb_burst_fast_serve then answers every following packet
 * that is byte-for-byte the armed one without returning to Python, and
 * hands back the first one that is not.  C owns the mechanism (compare,
 * run, answer, wait); Python owns every decision about what may be armed. */
#ifndef NNBURST_BURST_FAST_H
#define NNBURST_BURST_FAST_H

#include <stdint.h>

#include "fmq.h"
#include "plan.h"

/* cffi cdef begin */
/* Filled by the arming thread (the burst's worker) while no serve runs;
 * armed and stop are the only fields another thread touches, through the
 * functions below. */
typedef struct {
    const uint32_t *packet;      /* the armed request packet, 6 words a datum */
    uint64_t packet_datums;
    const uint32_t *result;      /* the result packet answered to it */
    uint64_t result_datums;
    int measure;                 /* 1: patch the result's timing datum (µs) */
    const nnb_plan_step *steps;  /* the model's whole plan (nnb_plan_check passed) */
    int64_t step_count;
    void *arena;
    int64_t arena_bytes;
    void *const *tensors;        /* inputs in the pools, constants, private outputs */
    const int64_t *tensor_bytes;
    int64_t tensor_count;
    int64_t copy_count;          /* private outputs copied to their pool locations */
    void *const *copy_from;
    void *const *copy_to;
    const int64_t *copy_bytes;
    int armed;                   /* 0: serve nothing (a slot freed, the cache changed) */
    int stop;                    /* 1: the burst is ending */
    uint64_t served;             /* requests answered here (statistics, tests) */
    /* What the last serve's waits took, for the caller's spin policy: */
    int64_t waits;               /* waits that call finished (a missed last one included) */
    int64_t waited_ns;           /* their lengths, summed */
    int64_t missed_ns;           /* the last wait's length when it missed the window, else 0 */
    uint64_t spun;               /* waits answered within a spin window (statistics, tests) */
} nnb_burst_fast_t;

/* Make the armed state visible to the serving thread (release). */
void nnb_burst_fast_arm(nnb_burst_fast_t *f);
/* From any thread: the next packet goes to Python (release store). */
void nnb_burst_fast_disarm(nnb_burst_fast_t *f);
void nnb_burst_fast_stop(nnb_burst_fast_t *f);

/* The burst worker's loop while requests repeat.  On entry rt->reply holds
 * a request packet of n datums just read (rt: the server's round trip,
 * writing results and reading requests).  While the struct is armed, not
 * stopped, and the packet equals the armed one, it runs the plan, copies
 * the outputs into place, writes the result and waits (spin_ns, then the
 * futex; no deadline) for the next packet.  Returns n > 0 for a packet in
 * rt->reply it did not serve (Python serves it), or what the last
 * nnb_fmq_round_trip returned when that was not a packet (<= 0; rt->wrote
 * says whether the result went out).
 *
 * The caller's spin policy picks the window and how many waits in a row it
 * holds for (max_waits > 0; <= 0: no limit).  The serve comes back with
 * its last packet unlooked-at after max_waits waits, or at once after a
 * wait that spun for spin_ns and still had to sleep (a miss), with waits,
 * waited_ns and missed_ns saying what every wait took: the policy records
 * them (the hits as well as the miss), picks again and calls again.  With
 * neither a window nor a limit (a policy that never spins) the waits are
 * counted but not timed. */
int64_t nnb_burst_fast_serve(nnb_burst_fast_t *f, nnb_round_trip_t *rt, uint64_t n,
                             int64_t spin_ns, int64_t max_waits);

/* The client's end: a request the burst sends again as it is (the same
 * packet, already in the round trip's request buffer) after its inputs
 * were copied into the staging memory, and whose answer, when it is
 * byte-for-byte the result the client parsed last time (a success without
 * timing), needs no parsing: the outputs are copied back here.  Anything
 * else (another answer, no answer, an error) goes back to Python, which
 * parses it as it parses every packet.  Filled once by the client's
 * thread; only that thread calls nnb_burst_repeat. */
typedef struct {
    nnb_round_trip_t *rt;        /* the client's: writes requests, reads results */
    uint64_t packet_datums;      /* the packet in rt->request */
    const uint32_t *result;      /* the expected answer, 6 words a datum */
    uint64_t result_datums;
    int64_t in_count;            /* the caller's buffers copied into the staging memory */
    void *const *in_to;
    void *const *in_from;
    const int64_t *in_bytes;
    int64_t out_count;           /* the staging memory's outputs copied back */
    void *const *out_to;
    void *const *out_from;
    const int64_t *out_bytes;
    int same;                    /* out: the answer was the expected one; outputs copied */
    uint64_t answered;           /* calls whose answer was the expected one (statistics, tests) */
    /* The caller's spin policy, as the server's (nnb_burst_fast_serve): the
     * window and how many waits it holds for (0: no limit), set by the
     * caller; what the waits took since, accumulated here until due says
     * the policy must hear of them (max_waits reached, or a wait that spun
     * for spin_ns and still had to sleep: a miss, its length missed_ns).
     * The caller records them, resets the four and sets a new window. */
    int64_t spin_ns;
    int64_t max_waits;
    int64_t waits;
    int64_t waited_ns;
    int64_t missed_ns;
    int due;
    int64_t wait_limit_ns;       /* a call without a deadline waits this long at most */
    int64_t deadline_ns;         /* out: the deadline the last call waited to */
} nnb_burst_repeat_t;

/* nnb_burst_repeat's answer when it was the expected one (outputs copied)
 * and the policy is not due: the one value the caller's hot path tests. */
#define NNB_REPEAT_ANSWERED 0x100000000

/* Copy the inputs in, send the packet, wait (r->spin_ns, then the futex, up
 * to the absolute deadline_ns; 0: r->wait_limit_ns from now; negative:
 * none) and read the answer into rt->reply; when it is the expected one,
 * copy the outputs back and set same.  Returns NNB_REPEAT_ANSWERED when it
 * was and due is not set; otherwise what nnb_fmq_round_trip returned (the
 * answer's datums, 0 or a negative errno: rt->wrote says whether the
 * request went out).  A round trip that got no answer is not counted as a
 * wait. */
int64_t nnb_burst_repeat(nnb_burst_repeat_t *r, int64_t deadline_ns);
/* cffi cdef end */

#endif
