/* The burst server's C path (burst_fast.c) under ASan/UBSan and TSan: a client
 * thread sends the armed packet K times over two real queues and then a
 * changed one; the server answers the K in C (outputs copied into place,
 * the result written) and hands the changed one back.  Then: a disarmed or
 * stopped struct serves nothing, and a teardown ends the wait with -EPIPE.
 * The client sends its repeats with nnb_burst_repeat (the client's C path).
 * Usage: test_burst_fast [K]. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burst_fast.h"

#define CHECK(c)                                                            \
    do {                                                                    \
        if (!(c)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#ifdef STANDIN_PLAN
/* The TSan build: the kernels' ifunc resolvers run before TSan starts, so
 * this build links a stand-in for the plan (one elementwise ADD) and tests
 * the threads and queues alone. */
int nnb_plan_check(const nnb_plan_step *steps, int64_t count, int64_t arena_bytes,
                   const int64_t *tensor_bytes, int64_t tensor_count) {
    (void)arena_bytes, (void)tensor_bytes;
    return count == 1 && steps[0].kind == NNB_PLAN_ADD && tensor_count == 3 ? 0 : -EINVAL;
}

int nnb_plan_run(const nnb_plan_step *steps, int64_t count, void *arena, int64_t arena_bytes,
                 void *const *tensors, const int64_t *tensor_bytes, int64_t tensor_count,
                 int64_t deadline_ns) {
    (void)count, (void)arena, (void)arena_bytes, (void)tensor_bytes, (void)tensor_count;
    (void)deadline_ns;
    const float *x = tensors[0], *y = tensors[1];
    float *out = tensors[2];
    for (int64_t i = 0; i < steps[0].count; i++) out[i] = x[i] + y[i];
    return 0;
}
#endif

#define DATUM 24
#define COUNT 64

static nnb_fmq_t *new_queue(void) {
    uint64_t bytes = nnb_fmq_required_bytes(DATUM, COUNT);
    void *mem = aligned_alloc(64, (bytes + 63) & ~(uint64_t)63);
    nnb_fmq_t *q = malloc(nnb_fmq_handle_bytes());
    CHECK(mem && q);
    CHECK(nnb_fmq_create(q, mem, bytes, DATUM, COUNT, NNB_FLAVOR_SYNCHRONIZED,
                         NNB_FMQ_HAS_EVFLAG) == 0);
    return q;
}

static nnb_fmq_t *requests, *results;
static uint32_t packet[4 * 6], changed[4 * 6];
static float a[12], b[12], target[12];
static long repeats;

/* The client's end is nnb_burst_repeat: the caller's input (user_a) is
 * copied into the "staging" buffer a, the output copied from target into
 * user_out, as a Python client's StagedRequest would. */
static float user_a[12], user_out[12];
static const uint32_t expected[2 * 6] = {0, 0, 2, 0, 1, 0,
                                          3, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF};

static void *client(void *arg) {
    (void)arg;
    uint32_t reply[COUNT * 6], other[2 * 6];
    nnb_round_trip_t rt = {requests, packet, COUNT, results, reply, COUNT, 0};
    void *in_to[1] = {a}, *in_from[1] = {user_a}, *out_to[1] = {user_out}, *out_from[1] = {target};
    static const int64_t sizes[1] = {48};
    nnb_burst_repeat_t r;
    memset(&r, 0, sizeof r);
    r.rt = &rt, r.packet_datums = 4, r.result = expected, r.result_datums = 2;
    r.in_count = 1, r.in_to = in_to, r.in_from = in_from, r.in_bytes = sizes;
    r.out_count = 1, r.out_to = out_to, r.out_from = out_from, r.out_bytes = sizes;
    r.spin_ns = 1000, r.max_waits = 5, r.wait_limit_ns = 10 * 1000000000LL;
    long reports = 0;
    for (long k = 0; k < repeats; k++) {
        for (int i = 0; i < 12; i++) user_a[i] = (float)(k + i);
        /* Half the calls without a deadline: the wait limit from now. */
        int64_t before = nnb_monotonic_ns(), deadline = k % 2 ? -1 : 0;
        int64_t got = nnb_burst_repeat(&r, deadline);
        CHECK(r.same == 1 && got == (r.due ? 2 : NNB_REPEAT_ANSWERED));
        CHECK(deadline ? r.deadline_ns == -1 : r.deadline_ns >= before + r.wait_limit_ns);
        for (int i = 0; i < 12; i++) CHECK(user_out[i] == (float)(k + i) + b[i]);
        CHECK(r.waits <= 5 && r.waited_ns >= r.waits && r.missed_ns <= r.waited_ns);
        if (r.due) { /* the policy's turn: 5 waits, or a miss past the 1 µs window */
            CHECK(r.waits == 5 || r.missed_ns > 1000);
            r.waits = r.waited_ns = r.missed_ns = r.due = 0;
            reports++;
        }
    }
    CHECK(r.answered == (uint64_t)repeats && reports >= repeats / 5);
    /* An answer other than the expected one: left in reply, nothing copied. */
    memcpy(other, expected, sizeof other);
    other[3] ^= 1;
    r.result = other;
    for (int i = 0; i < 12; i++) user_out[i] = -1.0f;
    CHECK(nnb_burst_repeat(&r, -1) == 2 && r.same == 0 && r.answered == (uint64_t)repeats);
    CHECK(memcmp(reply, expected, sizeof expected) == 0);
    for (int i = 0; i < 12; i++) CHECK(user_out[i] == -1.0f);
    /* Then a changed packet, which the server hands back to its caller. */
    CHECK(nnb_fmq_write_blocking(requests, changed, 4, NNB_EF_NOT_FULL, NNB_EF_NOT_EMPTY, -1,
                                 1000) == 0);
    return NULL;
}

int main(int argc, char **argv) {
    repeats = argc > 1 ? atol(argv[1]) : 1000;
    requests = new_queue();
    results = new_queue();
    for (int i = 0; i < 4 * 6; i++) packet[i] = changed[i] = (uint32_t)(i * 7);
    changed[3 * 6 + 3] ^= 1; /* one word of the last datum */
    for (int i = 0; i < 12; i++) b[i] = 0.5f * (float)i;

    nnb_plan_step step;
    memset(&step, 0, sizeof step);
    step.kind = NNB_PLAN_ADD;
    step.a = -1, step.b = -2, step.out = -3, step.count = 12, step.a_step = step.b_step = 1;
    step.lo = -1.0f / 0.0f, step.hi = 1.0f / 0.0f;
    static const int64_t bytes[3] = {48, 48, 48};
    CHECK(nnb_plan_check(&step, 1, 0, bytes, 3) == 0);
    float *private_out = malloc(48);
    void *tensors[3] = {a, b, private_out};
    void *from[1] = {private_out}, *to[1] = {target};
    static const int64_t copy_bytes[1] = {48};
    uint32_t result[2 * 6] = {0, 0, 2, 0, 1, 0, 3, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF};

    nnb_burst_fast_t f;
    memset(&f, 0, sizeof f);
    f.packet = packet, f.packet_datums = 4, f.result = result, f.result_datums = 2;
    f.steps = &step, f.step_count = 1, f.tensors = tensors, f.tensor_bytes = bytes;
    f.tensor_count = 3, f.copy_count = 1, f.copy_from = from, f.copy_to = to;
    f.copy_bytes = copy_bytes;
    nnb_burst_fast_arm(&f);

    uint32_t request_buffer[COUNT * 6], result_buffer[COUNT * 6];
    nnb_round_trip_t rt = {results, result_buffer, COUNT, requests, request_buffer, COUNT, 0};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, client, NULL) == 0);
    int64_t n = nnb_fmq_read_available_blocking(requests, request_buffer, COUNT, NNB_EF_NOT_FULL,
                                                NNB_EF_NOT_EMPTY, -1, 1000);
    CHECK(n == 4);
    long misses = 0, calls = 0;
    do { /* back after 3 waits, or a wait past the 1 µs window, its packet unlooked-at */
        n = nnb_burst_fast_serve(&f, &rt, (uint64_t)n, 1000, 3);
        calls++;
        CHECK(f.waits <= 3 && f.waited_ns >= f.waits && f.missed_ns <= f.waited_ns);
        CHECK(f.missed_ns == 0 || f.missed_ns > 1000);
        misses += f.missed_ns > 0;
    } while (n > 0 && f.waits > 0);
    CHECK(calls >= repeats / 3); /* every third wait at the latest came back */
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(n == 4 && memcmp(request_buffer, changed, sizeof changed) == 0);
    CHECK(f.served == (uint64_t)repeats + 1); /* the last one was answered unexpected */

    /* The queue torn down first: a serve that goes on where it must not
     * returns -EPIPE below instead of waiting for a request that never comes. */
    CHECK(nnb_evflag_wake(nnb_fmq_evflag_word(requests), NNB_EF_TEARDOWN) == 0);
    /* The armed packet, but disarmed or stopped: handed back at once. */
    memcpy(request_buffer, packet, sizeof packet);
    nnb_burst_fast_disarm(&f);
    const uint64_t served = (uint64_t)repeats + 1;
    CHECK(nnb_burst_fast_serve(&f, &rt, 4, 0, 0) == 4 && f.served == served);
    nnb_burst_fast_arm(&f);
    nnb_burst_fast_stop(&f);
    CHECK(nnb_burst_fast_serve(&f, &rt, 4, 0, 0) == 4 && f.served == served);
    /* A shorter packet is never compared past its end. */
    f.stop = 0;
    CHECK(nnb_burst_fast_serve(&f, &rt, 3, 0, 0) == 3 && f.served == served);

    /* Torn down while waiting for the next request: -EPIPE, the result written. */
    CHECK(nnb_burst_fast_serve(&f, &rt, 4, 0, 0) == -EPIPE && rt.wrote == 1);
    CHECK(f.served == served + 1);
    printf("burst_fast: %ld repeats sent and answered in C (%ld waits past the window), an "
           "unexpected answer left to the caller, the changed packet handed back: ok\n",
           repeats, misses);
    free(private_out);
    return 0;
}
