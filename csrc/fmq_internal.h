/* Private to the C core: the handle layout and the atomics helpers. */
#ifndef NNBURST_FMQ_INTERNAL_H
#define NNBURST_FMQ_INTERNAL_H

#include <errno.h>
#include <stdint.h>

#include "fmq.h"

/* Counters are shared between processes: they must be address-free,
 * lock-free 64-bit atomics. */
_Static_assert(__atomic_always_lock_free(sizeof(uint64_t), 0), "64-bit atomics must be lock-free");
_Static_assert(__atomic_always_lock_free(sizeof(uint32_t), 0), "32-bit atomics must be lock-free");

/* The shared header.  Only the creator writes it; an attacher compares it
 * with the descriptor and from then on uses its own private copy of every
 * size, so a peer scribbling on the header can't change our bounds. */
typedef struct {
    uint32_t magic;
    uint32_t version;
    uint32_t quantum;
    uint32_t flavor;
    uint64_t count;
    uint64_t ring_bytes;
    uint32_t flags;
    uint32_t reserved;
} nnb_fmq_header_t;

_Static_assert(sizeof(nnb_fmq_header_t) <= NNB_FMQ_READ_OFFSET, "header overlaps the read counter");

struct nnb_fmq {
    uint8_t *ring;
    uint64_t *read_ctr;     /* shared (sync) or &private_read (unsync) */
    uint64_t *write_ctr;    /* shared */
    uint64_t *write_begin;  /* unsync only: shared claim counter (the seqlock
                               "begin"), kept in the unused shared read slot */
    uint32_t *evflag;       /* shared, or NULL */
    uint64_t ring_bytes;    /* private copies: never re-read from shared memory */
    uint64_t quantum;
    uint64_t count;
    uint32_t flavor;
    uint64_t private_read;  /* the unsynchronized reader's own counter */
    /* Sync flavor: the peer's counter as last seen.  Counters only go up, so
     * a stale value only under-estimates room or data; the shared counter is
     * re-read (and re-validated) only when the cached one says "not enough".
     * This saves a cache-line transfer per operation in steady state. */
    uint64_t cached_read;   /* writer side */
    uint64_t cached_write;  /* reader side */
    uint64_t granted_write; /* elements handed out by begin_write, for commit checks */
    uint64_t granted_read;
    uint32_t shut;          /* set by nnb_fmq_shutdown */
    uint32_t inside;        /* calls currently using the mapping */
    void (*read_hook)(void *); /* test hook, NULL in use: see nnb_fmq_set_read_hook */
    void *read_hook_ctx;
};

/* Loads and stores used on shared words.  The memory order is spelled out at
 * every call site, with the sync point it belongs to. */
#define LOAD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define STORE_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

/* Pause the CPU inside a spin loop so the sibling hyperthread or the peer
 * gets the core's resources. */
static inline void nnb_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* Snapshot of the counters, validated: what every operation works from. */
typedef struct {
    uint64_t read;
    uint64_t write;
} nnb_counters_t;

/* Every public call on a handle runs between enter() and leave(), so that a
 * thread closing the queue can wait for calls in other threads to finish
 * before the mapping goes.  Dekker-style: the caller's seq_cst increment
 * then load of `shut`, against shutdown's seq_cst store of `shut` then load
 * of `inside`: at least one of the two sees the other.  The release in
 * leave() pairs with the acquire load in nnb_fmq_calls_inside, so every
 * access a call made to the mapping happens before the owner unmaps it. */
static inline void nnb_leave(nnb_fmq_t *q) { __atomic_fetch_sub(&q->inside, 1, __ATOMIC_RELEASE); }

static inline int nnb_enter(nnb_fmq_t *q) {
    __atomic_fetch_add(&q->inside, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&q->shut, __ATOMIC_SEQ_CST)) {
        nnb_leave(q);
        return -EBADF;
    }
    return 0;
}

/* Unguarded internals shared by fmq.c and fmq_blocking.c. */
int nnb_fmq_load_counters(nnb_fmq_t *q, int for_write, nnb_counters_t *out);
int64_t nnb_fmq_readable(nnb_fmq_t *q);
int64_t nnb_fmq_writable(nnb_fmq_t *q);
int nnb_fmq_try_write(nnb_fmq_t *q, const void *src, uint64_t n);
int nnb_fmq_try_read(nnb_fmq_t *q, void *dst, uint64_t n);
int nnb_evflag_wait_once(uint32_t *word, uint32_t bits, int64_t deadline_ns, uint32_t *seen);

#endif
