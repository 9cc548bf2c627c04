/*
 * nnburst C core, the queue's contract: an SPSC ring on shared memory, its
 * event flag, and the clock deadlines are measured on (fmq.c,
 * fmq_blocking.c, event_flag.c).
 *
 * C owns the mechanism only: a single-producer/single-consumer ring on
 * memory the caller mapped, 64-bit byte counters, a futex event-flag word,
 * spin-then-wait loops and bulk copies.  These files never map, allocate,
 * log or print.  Every function returns 0 or a negative errno (status.h).
 *
 * Deadlines: deadline_ns is an absolute CLOCK_MONOTONIC time
 * (nnb_monotonic_ns), or negative for none; a caller converts a timeout to
 * one once and passes the same deadline to every retry.
 *
 * Shared-memory layout of one queue (all offsets 8-byte aligned; each hot
 * word on its own 64-byte cache line so reader and writer don't false-share):
 *
 *   0    header: magic, version, quantum, flavor, count, ring_bytes, flags
 *   64   read counter   (uint64, bytes, only goes up)
 *   128  write counter  (uint64, bytes, only goes up)
 *   192  event-flag word (uint32 futex word; present iff NNB_FMQ_HAS_EVFLAG)
 *   256  data ring, ring_bytes = count * quantum bytes
 *
 * SYNC POINTS (acquire/release pairs; each site in the .c files says which):
 *   S1 writer's store-release of w  ->  reader's load-acquire of w:
 *      the data copied into the ring is visible before w says it's there.
 *   S2 reader's store-release of r  ->  writer's load-acquire of r:
 *      the reader finished copying a slot out before the writer reuses it.
 *   S3 event-flag fetch_or (wake) / fetch_and (wait) are seq_cst RMWs on
 *      one word: the futex only rings the doorbell; data always travels
 *      through S1/S2, and a waiter re-checks the counters after every wake.
 */
#ifndef NNBURST_FMQ_H
#define NNBURST_FMQ_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* cffi cdef begin */
#define NNB_FMQ_MAGIC 0x51424e4e
#define NNB_FMQ_VERSION 1

#define NNB_FMQ_HEADER_OFFSET 0
#define NNB_FMQ_READ_OFFSET 64
#define NNB_FMQ_WRITE_OFFSET 128
#define NNB_FMQ_EVFLAG_OFFSET 192
#define NNB_FMQ_RING_OFFSET 256

#define NNB_FLAVOR_SYNCHRONIZED 1
#define NNB_FLAVOR_UNSYNCHRONIZED 2

#define NNB_FMQ_HAS_EVFLAG 1

#define NNB_EF_NOT_FULL 1
#define NNB_EF_NOT_EMPTY 2
#define NNB_EF_TEARDOWN 0x80000000


/* Process-local queue handle; callers allocate nnb_fmq_handle_bytes(). */
typedef struct nnb_fmq nnb_fmq_t;

/* One contiguous part of a zero-copy transaction, relative to the ring. */
typedef struct {
    uint64_t offset_bytes;
    uint64_t count;
} nnb_region_t;

size_t nnb_fmq_handle_bytes(void);

/* Bytes of shared memory a queue needs; 0 if the size overflows. */
uint64_t nnb_fmq_required_bytes(uint32_t quantum, uint64_t count);

/* Format fresh shared memory as an empty queue and bind the handle to it. */
int nnb_fmq_create(nnb_fmq_t *q, void *mem, uint64_t mem_bytes, uint32_t quantum,
                   uint64_t count, uint32_t flavor, uint32_t flags);

/* Bind a handle to a queue someone else created; validates the header
 * against what the descriptor promised.  reset_pointers zeroes the shared
 * counters (sync) or the write counter (unsync), as libfmq does. */
int nnb_fmq_attach(nnb_fmq_t *q, void *mem, uint64_t mem_bytes, uint32_t quantum,
                   uint64_t count, uint32_t flavor, uint32_t flags, int reset_pointers);

/* Element counts; negative errno (-EPROTO) if the counters are corrupt. */
int64_t nnb_fmq_available_to_read(nnb_fmq_t *q);
int64_t nnb_fmq_available_to_write(nnb_fmq_t *q);

/* All-or-nothing copies of n elements. */
int nnb_fmq_write(nnb_fmq_t *q, const void *src, uint64_t n);
int nnb_fmq_read(nnb_fmq_t *q, void *dst, uint64_t n);

/* Zero-copy: up to two regions (the second when the data wraps). */
int nnb_fmq_begin_write(nnb_fmq_t *q, uint64_t n, nnb_region_t *regions);
int nnb_fmq_commit_write(nnb_fmq_t *q, uint64_t n);
int nnb_fmq_begin_read(nnb_fmq_t *q, uint64_t n, nnb_region_t *regions);
int nnb_fmq_commit_read(nnb_fmq_t *q, uint64_t n);

/* Blocking (synchronized flavor, event flag required).  deadline_ns is an
 * absolute CLOCK_MONOTONIC time, or negative for no deadline.  spin_ns
 * polls the counters for that long before sleeping on the futex.  The
 * writer waits on read_notification and wakes write_notification after its
 * write; the reader the other way round.  The teardown bit ends any wait
 * with -EPIPE. */
int nnb_fmq_write_blocking(nnb_fmq_t *q, const void *src, uint64_t n,
                           uint32_t read_notification, uint32_t write_notification,
                           int64_t deadline_ns, int64_t spin_ns);
int nnb_fmq_read_blocking(nnb_fmq_t *q, void *dst, uint64_t n,
                          uint32_t read_notification, uint32_t write_notification,
                          int64_t deadline_ns, int64_t spin_ns);

/* Wait until at least one element is readable, then read everything that is
 * there, up to max_n.  Returns the count read (> 0) or a negative errno.
 * This is how a packet of unknown length is received in one call. */
int64_t nnb_fmq_read_available_blocking(nnb_fmq_t *q, void *dst, uint64_t max_n,
                                        uint32_t read_notification,
                                        uint32_t write_notification,
                                        int64_t deadline_ns, int64_t spin_ns);

/* One round trip in one call: write request[0..n) to `requests` (blocking,
 * waking its reader), then wait for and read everything available on
 * `replies` into `reply` (up to reply_capacity), both with the default bits
 * (a writer waits NOT_FULL and wakes NOT_EMPTY).  n > request_capacity is
 * -EINVAL.  `wrote` is set to 1 once the request went out.  Returns the
 * count read, or a negative errno.  What does not change between round
 * trips lives in the struct, filled once, so a call passes four arguments:
 * this is the hot path of a request/response peer, one crossing from Python
 * per round trip. */
typedef struct {
    nnb_fmq_t *requests;
    const void *request;
    uint64_t request_capacity;
    nnb_fmq_t *replies;
    void *reply;
    uint64_t reply_capacity;
    int wrote;
} nnb_round_trip_t;

int64_t nnb_fmq_round_trip(nnb_round_trip_t *rt, uint64_t n, int64_t deadline_ns,
                           int64_t spin_ns);

/* Closing from another thread: after nnb_fmq_shutdown every new call on the
 * handle returns -EBADF at once; the owner waits until nnb_fmq_calls_inside
 * is 0 (a teardown wake ends blocked calls) and only then unmaps. */
void nnb_fmq_shutdown(nnb_fmq_t *q);
int nnb_fmq_calls_inside(nnb_fmq_t *q);

/* Test hook (tests/test_fmq_unsync.py), NULL unless a test sets it: every
 * later read on this handle copies the first half of its bytes, calls
 * hook(ctx), then copies the rest.  A test's hook writes through another
 * handle, so a reader is lapped in the middle of its copy at a chosen
 * point, which a real scheduler does only by chance.  Costs one
 * predictable branch per read; pass NULL to remove it. */
void nnb_fmq_set_read_hook(nnb_fmq_t *q, void (*hook)(void *), void *ctx);

/* The queue's event-flag word, or NULL. */
uint32_t *nnb_fmq_evflag_word(nnb_fmq_t *q);

/* Event flag on any 4-byte aligned shared word. */
int nnb_evflag_wake(uint32_t *word, uint32_t bits);
/* Consumes and reports pending bits of `bits` in *seen.  retry=1 loops over
 * spurious wakes until a bit, the deadline, a signal or teardown. */
int nnb_evflag_wait(uint32_t *word, uint32_t bits, int64_t deadline_ns, int retry,
                    uint32_t *seen);

/* CLOCK_MONOTONIC now, in ns: the clock every deadline is measured on. */
int64_t nnb_monotonic_ns(void);

/* cffi cdef end */

#endif /* NNBURST_FMQ_H */
