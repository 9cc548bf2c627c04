/* C-only tests of the ring, run natively and under TSan and ASan+UBSan.
 *
 * A producer and a consumer thread stream millions of elements through a
 * synchronized queue with random batch sizes, using both the blocking calls
 * (futex) and the spin window, and verify every element; then the corrupt
 * header cases must be rejected without touching memory out of bounds.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fmq_internal.h"

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

typedef struct {
    uint64_t seq;
    uint64_t check;
} item_t;

static uint64_t mix(uint64_t x) { return x * 0x9e3779b97f4a7c15ull ^ 0xabcdefull; }

typedef struct {
    nnb_fmq_t *q;
    uint64_t count;
    uint64_t total;
    int64_t spin_ns;
    unsigned seed;
} job_t;

static void *producer(void *arg) {
    job_t *job = arg;
    item_t batch[97];
    uint64_t seq = 0;
    while (seq < job->total) {
        uint64_t n = 1 + (uint64_t)rand_r(&job->seed) % 97;
        if (n > job->count) n = job->count;
        if (n > job->total - seq) n = job->total - seq;
        for (uint64_t i = 0; i < n; i++) batch[i] = (item_t){seq + i, mix(seq + i)};
        int rc = nnb_fmq_write_blocking(job->q, batch, n, NNB_EF_NOT_FULL, NNB_EF_NOT_EMPTY, -1,
                                        job->spin_ns);
        CHECK(rc == 0);
        seq += n;
    }
    return NULL;
}

static void *consumer(void *arg) {
    job_t *job = arg;
    item_t batch[128];
    uint64_t seq = 0;
    while (seq < job->total) {
        int64_t got = nnb_fmq_read_available_blocking(job->q, batch, 128, NNB_EF_NOT_FULL,
                                                      NNB_EF_NOT_EMPTY, -1, job->spin_ns);
        CHECK(got > 0);
        for (int64_t i = 0; i < got; i++) {
            CHECK(batch[i].seq == seq);
            CHECK(batch[i].check == mix(seq));
            seq++;
        }
    }
    return NULL;
}

static void *new_memory(uint64_t bytes) {
    void *mem = aligned_alloc(64, (bytes + 63) & ~(uint64_t)63);
    CHECK(mem != NULL);
    memset(mem, 0, bytes);
    return mem;
}

static void stream(uint64_t count, uint64_t total, int64_t spin_ns) {
    uint64_t bytes = nnb_fmq_required_bytes(sizeof(item_t), count);
    void *mem = new_memory(bytes);
    nnb_fmq_t *wq = malloc(nnb_fmq_handle_bytes()), *rq = malloc(nnb_fmq_handle_bytes());
    CHECK(nnb_fmq_create(wq, mem, bytes, sizeof(item_t), count, NNB_FLAVOR_SYNCHRONIZED,
                         NNB_FMQ_HAS_EVFLAG) == 0);
    CHECK(nnb_fmq_attach(rq, mem, bytes, sizeof(item_t), count, NNB_FLAVOR_SYNCHRONIZED,
                         NNB_FMQ_HAS_EVFLAG, 0) == 0);
    job_t w = {wq, count, total, spin_ns, 1}, r = {rq, count, total, spin_ns, 2};
    pthread_t tw, tr;
    pthread_create(&tr, NULL, consumer, &r);
    pthread_create(&tw, NULL, producer, &w);
    pthread_join(tw, NULL);
    pthread_join(tr, NULL);
    CHECK(nnb_fmq_available_to_read(rq) == 0);
    free(wq);
    free(rq);
    free(mem);
}

static void corrupt_counters(void) {
    uint64_t count = 64, bytes = nnb_fmq_required_bytes(4, count);
    uint8_t *mem = new_memory(bytes);
    nnb_fmq_t *q = malloc(nnb_fmq_handle_bytes());
    CHECK(nnb_fmq_create(q, mem, bytes, 4, count, NNB_FLAVOR_SYNCHRONIZED, NNB_FMQ_HAS_EVFLAG) == 0);
    uint64_t *r = (uint64_t *)(mem + NNB_FMQ_READ_OFFSET), *w = (uint64_t *)(mem + NNB_FMQ_WRITE_OFFSET);
    uint32_t buf[128] = {0};
    *w = 3; /* misaligned */
    CHECK(nnb_fmq_read(q, buf, 1) == -EPROTO);
    CHECK(nnb_fmq_write(q, buf, 1) == -EPROTO);
    *w = 4, *r = 8; /* w < r */
    CHECK(nnb_fmq_available_to_read(q) == -EPROTO);
    CHECK(nnb_fmq_available_to_write(q) == -EPROTO);
    *w = 4 * count + 4, *r = 0; /* more than a ring of data */
    CHECK(nnb_fmq_read(q, buf, 1) == -EPROTO);
    CHECK(nnb_fmq_read_blocking(q, buf, 1, 1, 2, 0, 0) == -EPROTO);
    *w = UINT64_MAX - 3, *r = UINT64_MAX - 3 - 8; /* near the wrap: still in bounds */
    CHECK(nnb_fmq_read(q, buf, 2) == 0);
    CHECK(nnb_fmq_create(q, mem + 1, bytes, 4, count, NNB_FLAVOR_SYNCHRONIZED, 0) == -EINVAL);
    CHECK(nnb_fmq_attach(q, mem, bytes - 8, 4, count, NNB_FLAVOR_SYNCHRONIZED, NNB_FMQ_HAS_EVFLAG, 0) == -EINVAL);
    CHECK(nnb_fmq_attach(q, mem, bytes, 8, count / 2, NNB_FLAVOR_SYNCHRONIZED, NNB_FMQ_HAS_EVFLAG, 0) == -EPROTO);
    free(q);
    free(mem);
}

int main(int argc, char **argv) {
    uint64_t total = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
    stream(1024, total, 0);        /* futex only */
    stream(1024, total, 50000);    /* spin window, then futex */
    stream(61, total / 4, 0);      /* odd size: wraps constantly */
    corrupt_counters();
    printf("test_fmq: %llu elements x 2 streams + odd ring + corruption cases: ok\n",
           (unsigned long long)total);
    return 0;
}
