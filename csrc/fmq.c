/* SPSC ring on caller-provided shared memory: layout, counters, copies. */
#include <string.h>

#include "fmq_internal.h"

size_t nnb_fmq_handle_bytes(void) { return sizeof(struct nnb_fmq); }

uint64_t nnb_fmq_required_bytes(uint32_t quantum, uint64_t count) {
    if (quantum == 0 || count == 0) return 0;
    if (count > (UINT64_MAX / 4) / quantum) return 0; /* ring size would overflow */
    uint64_t ring = (uint64_t)quantum * count;
    uint64_t total = NNB_FMQ_RING_OFFSET + ring;
    return (total + 7) & ~(uint64_t)7;
}

static int check_shape(void *mem, uint64_t mem_bytes, uint32_t quantum, uint64_t count,
                       uint32_t flavor) {
    if (mem == NULL || ((uintptr_t)mem & 7) != 0) return -EINVAL;
    if (flavor != NNB_FLAVOR_SYNCHRONIZED && flavor != NNB_FLAVOR_UNSYNCHRONIZED) return -EINVAL;
    uint64_t need = nnb_fmq_required_bytes(quantum, count);
    if (need == 0 || mem_bytes < need) return -EINVAL;
    return 0;
}

static void bind(nnb_fmq_t *q, uint8_t *mem, uint32_t quantum, uint64_t count, uint32_t flavor,
                 uint32_t flags) {
    memset(q, 0, sizeof *q);
    q->ring = mem + NNB_FMQ_RING_OFFSET;
    q->write_ctr = (uint64_t *)(mem + NNB_FMQ_WRITE_OFFSET);
    /* An unsynchronized queue has many readers, each with its own position,
     * so the reader's counter lives in this process, not in shared memory. */
    uint64_t *shared_read = (uint64_t *)(mem + NNB_FMQ_READ_OFFSET);
    if (flavor == NNB_FLAVOR_SYNCHRONIZED) {
        q->read_ctr = shared_read;
    } else {
        q->read_ctr = &q->private_read;
        q->write_begin = shared_read;
    }
    q->evflag = (flags & NNB_FMQ_HAS_EVFLAG) ? (uint32_t *)(mem + NNB_FMQ_EVFLAG_OFFSET) : NULL;
    q->quantum = quantum;
    q->count = count;
    q->ring_bytes = (uint64_t)quantum * count;
    q->flavor = flavor;
}

int nnb_fmq_create(nnb_fmq_t *q, void *mem, uint64_t mem_bytes, uint32_t quantum, uint64_t count,
                   uint32_t flavor, uint32_t flags) {
    int rc = check_shape(mem, mem_bytes, quantum, count, flavor);
    if (rc) return rc;
    uint8_t *base = mem;
    nnb_fmq_header_t *h = (nnb_fmq_header_t *)base;
    h->version = NNB_FMQ_VERSION;
    h->quantum = quantum;
    h->flavor = flavor;
    h->count = count;
    h->ring_bytes = (uint64_t)quantum * count;
    h->flags = flags & NNB_FMQ_HAS_EVFLAG;
    h->reserved = 0;
    bind(q, base, quantum, count, flavor, flags);
    /* Not yet shared with anyone: plain stores would do, but release keeps
     * TSan and the reader of the magic (attach, after a process boundary
     * that already orders everything) consistent. */
    STORE_RELEASE((uint64_t *)(base + NNB_FMQ_READ_OFFSET), 0);
    STORE_RELEASE(q->write_ctr, 0);
    if (q->evflag) __atomic_store_n(q->evflag, 0, __ATOMIC_RELEASE);
    /* The magic goes last, so a half-written header never looks valid. */
    __atomic_store_n(&h->magic, (uint32_t)NNB_FMQ_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

int nnb_fmq_attach(nnb_fmq_t *q, void *mem, uint64_t mem_bytes, uint32_t quantum, uint64_t count,
                   uint32_t flavor, uint32_t flags, int reset_pointers) {
    int rc = check_shape(mem, mem_bytes, quantum, count, flavor);
    if (rc) return rc;
    const nnb_fmq_header_t *h = (const nnb_fmq_header_t *)mem;
    /* Acquire pairs with the creator's release of the magic. */
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != NNB_FMQ_MAGIC) return -EPROTO;
    if (h->version != NNB_FMQ_VERSION || h->quantum != quantum || h->flavor != flavor ||
        h->count != count || h->ring_bytes != (uint64_t)quantum * count ||
        h->flags != (flags & NNB_FMQ_HAS_EVFLAG))
        return -EPROTO;
    bind(q, mem, quantum, count, flavor, flags);
    if (reset_pointers) {
        /* libfmq semantics: wipes the peer's state; only safe before traffic. */
        STORE_RELEASE((uint64_t *)((uint8_t *)mem + NNB_FMQ_READ_OFFSET), 0);
        STORE_RELEASE(q->write_ctr, 0);
    }
    return 0;
}

uint32_t *nnb_fmq_evflag_word(nnb_fmq_t *q) { return q->evflag; }

/* Loads both counters once each and validates them; every bound used later
 * comes from this snapshot (no second read a peer could race, the TOCTOU
 * libfmq fixed in 2024).  An unsynchronized reader that was lapped is not
 * corrupt: the caller sees write - read > ring_bytes and handles overflow. */
int nnb_fmq_load_counters(nnb_fmq_t *q, int for_write, nnb_counters_t *out) {
    if (for_write) {
        /* S2: acquire pairs with the reader's release of r in commit; the
         * reader is done with the slots we are about to overwrite. */
        out->read = LOAD_ACQUIRE(q->read_ctr);
        /* Our own counter; relaxed is enough for a value only we store (a
         * hostile store is caught by the checks below). */
        out->write = LOAD_RELAXED(q->write_ctr);
    } else {
        /* S1: acquire pairs with the writer's release of w; the data up to
         * w is visible to our copy. */
        out->write = LOAD_ACQUIRE(q->write_ctr);
        out->read = LOAD_RELAXED(q->read_ctr);
    }
    if (out->write % q->quantum != 0 || out->read % q->quantum != 0) return -EPROTO;
    if (out->write < out->read) return -EPROTO;
    if (q->flavor == NNB_FLAVOR_SYNCHRONIZED && out->write - out->read > q->ring_bytes)
        return -EPROTO;
    return 0;
}

int64_t nnb_fmq_readable(nnb_fmq_t *q) {
    nnb_counters_t c;
    int rc = nnb_fmq_load_counters(q, 0, &c);
    if (rc) return rc;
    /* Unsync: more than count means "you were overrun" (libfmq's signal). */
    return (int64_t)((c.write - c.read) / q->quantum);
}

int64_t nnb_fmq_writable(nnb_fmq_t *q) {
    nnb_counters_t c;
    int rc = nnb_fmq_load_counters(q, 1, &c);
    if (rc) return rc;
    uint64_t used = c.write - c.read;
    if (used > q->ring_bytes) return 0; /* unsync writer far ahead of its own r */
    return (int64_t)((q->ring_bytes - used) / q->quantum);
}

/* Regions of n elements starting at byte counter pos; never splits an
 * element because ring_bytes and pos are multiples of the quantum. */
static void regions_at(const nnb_fmq_t *q, uint64_t pos, uint64_t n, nnb_region_t *r) {
    uint64_t offset = pos % q->ring_bytes;
    uint64_t contiguous = (q->ring_bytes - offset) / q->quantum;
    r[0].offset_bytes = offset;
    r[0].count = n < contiguous ? n : contiguous;
    r[1].offset_bytes = 0;
    r[1].count = n - r[0].count;
}

static void copy_in(nnb_fmq_t *q, uint64_t pos, const uint8_t *src, uint64_t n) {
    nnb_region_t r[2];
    regions_at(q, pos, n, r);
    uint64_t first = r[0].count * q->quantum;
    memcpy(q->ring + r[0].offset_bytes, src, first);
    if (r[1].count) memcpy(q->ring, src + first, r[1].count * q->quantum);
}

static void copy_out(nnb_fmq_t *q, uint64_t pos, uint8_t *dst, uint64_t n) {
    nnb_region_t r[2];
    regions_at(q, pos, n, r);
    uint64_t first = r[0].count * q->quantum;
    memcpy(dst, q->ring + r[0].offset_bytes, first);
    if (r[1].count) memcpy(dst + first, q->ring, r[1].count * q->quantum);
}

/* copy_out split around the test hook (nnb_fmq_set_read_hook): the two
 * halves are byte ranges, so the split may fall inside an element. */
static void copy_bytes_out(nnb_fmq_t *q, uint64_t pos, uint8_t *dst, uint64_t bytes) {
    uint64_t offset = pos % q->ring_bytes;
    uint64_t first = q->ring_bytes - offset < bytes ? q->ring_bytes - offset : bytes;
    memcpy(dst, q->ring + offset, first);
    if (bytes > first) memcpy(dst + first, q->ring, bytes - first);
}

static void copy_out_hooked(nnb_fmq_t *q, uint64_t pos, uint8_t *dst, uint64_t n) {
    uint64_t bytes = n * q->quantum;
    uint64_t half = bytes / 2;
    copy_bytes_out(q, pos, dst, half);
    q->read_hook(q->read_hook_ctx);
    copy_bytes_out(q, pos + half, dst + half, bytes - half);
}

void nnb_fmq_set_read_hook(nnb_fmq_t *q, void (*hook)(void *), void *ctx) {
    q->read_hook_ctx = ctx;
    q->read_hook = hook;
}

/* Checks for a write of n elements; on success *pos is where it goes. */
static int prepare_write(nnb_fmq_t *q, uint64_t n, uint64_t *pos) {
    if (n > q->count) return -EINVAL;
    if (q->flavor == NNB_FLAVOR_UNSYNCHRONIZED) {
        /* Unsync writers never wait for readers; only our own w matters. */
        uint64_t w = LOAD_RELAXED(q->write_ctr);
        if (w % q->quantum != 0) return -EPROTO;
        /* Seqlock "begin": claim [w, w+n) before touching the ring, so a
         * reader copying those slots can tell its copy may be torn.  The
         * release fence keeps the claim ahead of the data stores; it pairs
         * with the reader's acquire fence in lapped_during_copy. */
        STORE_RELAXED(q->write_begin, w + n * q->quantum);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        *pos = w;
        return 0;
    }
    uint64_t need = n * q->quantum;
    /* Our own counter: relaxed is enough for a value only we store; a
     * hostile store is caught by the checks. */
    uint64_t w = LOAD_RELAXED(q->write_ctr);
    uint64_t r = q->cached_read;
    if (w % q->quantum != 0 || w < r || w - r > q->ring_bytes ||
        q->ring_bytes - (w - r) < need) {
        nnb_counters_t c;
        int rc = nnb_fmq_load_counters(q, 1, &c); /* S2 acquire of r */
        if (rc) return rc;
        q->cached_read = c.read;
        w = c.write;
        if (q->ring_bytes - (c.write - c.read) < need) return -EAGAIN;
    }
    *pos = w;
    return 0;
}

/* An unsynchronized reader that fell more than a ring behind keeps the newest
 * half: r = w - floor(count/2) * quantum (libfmq since 2024-09). */
static int overflowed(nnb_fmq_t *q, uint64_t w) {
    uint64_t keep = (q->count / 2) * q->quantum;
    STORE_RELAXED(q->read_ctr, w - keep); /* private counter: no one else reads it */
    return -EOVERFLOW;
}

static int prepare_read(nnb_fmq_t *q, uint64_t n, uint64_t *pos) {
    if (q->flavor == NNB_FLAVOR_SYNCHRONIZED && n <= q->count) {
        /* Data up to cached_write was made visible by the acquire load that
         * read it (S1), so reading below it needs no new load of w. */
        uint64_t r = LOAD_RELAXED(q->read_ctr); /* our own counter */
        uint64_t w = q->cached_write;
        if (r % q->quantum == 0 && w >= r && w - r <= q->ring_bytes && w - r >= n * q->quantum) {
            *pos = r;
            return 0;
        }
    }
    nnb_counters_t c;
    int rc = nnb_fmq_load_counters(q, 0, &c);
    if (rc) return rc;
    if (c.write - c.read > q->ring_bytes) return overflowed(q, c.write);
    q->cached_write = c.write;
    if (n > q->count) return -EINVAL;
    if (c.write - c.read < n * q->quantum) return -EAGAIN;
    *pos = c.read;
    return 0;
}

/* After copying out of an unsynchronized ring: did a writer claim any of
 * the slots we copied, even one still in progress?  The acquire fence keeps
 * the re-check after the copy's loads (the seqlock reader pattern; pairs
 * with the writer's release fence in prepare_write). */
static int lapped_during_copy(nnb_fmq_t *q, uint64_t r) {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint64_t claimed = LOAD_RELAXED(q->write_begin);
    if (claimed - r > q->ring_bytes) return overflowed(q, LOAD_ACQUIRE(q->write_ctr));
    return 0;
}

int nnb_fmq_try_write(nnb_fmq_t *q, const void *src, uint64_t n) {
    uint64_t pos;
    int rc = prepare_write(q, n, &pos);
    if (rc || n == 0) return rc;
    copy_in(q, pos, src, n);
    /* S1: release publishes the copied elements with the new w. */
    STORE_RELEASE(q->write_ctr, pos + n * q->quantum);
    return 0;
}

int nnb_fmq_try_read(nnb_fmq_t *q, void *dst, uint64_t n) {
    uint64_t pos;
    int rc = prepare_read(q, n, &pos);
    if (rc || n == 0) return rc;
    if (q->read_hook)
        copy_out_hooked(q, pos, dst, n);
    else
        copy_out(q, pos, dst, n);
    if (q->flavor == NNB_FLAVOR_UNSYNCHRONIZED) {
        rc = lapped_during_copy(q, pos);
        if (rc) return rc;
    }
    /* S2: release hands the slots back to the writer after our copy. */
    STORE_RELEASE(q->read_ctr, pos + n * q->quantum);
    return 0;
}

static int write_unguarded(nnb_fmq_t *q, const void *src, uint64_t n) {
    if (src == NULL && n) return -EINVAL;
    return nnb_fmq_try_write(q, src, n);
}

static int read_unguarded(nnb_fmq_t *q, void *dst, uint64_t n) {
    if (dst == NULL && n) return -EINVAL;
    return nnb_fmq_try_read(q, dst, n);
}

static int begin_write_unguarded(nnb_fmq_t *q, uint64_t n, nnb_region_t *regions) {
    memset(regions, 0, 2 * sizeof *regions);
    q->granted_write = 0;
    uint64_t pos;
    int rc = prepare_write(q, n, &pos);
    if (rc) return rc;
    regions_at(q, pos, n, regions);
    q->granted_write = n;
    return 0;
}

static int commit_write_unguarded(nnb_fmq_t *q, uint64_t n) {
    /* Unlike libfmq, refuse to publish more than begin_write granted. */
    if (n > q->granted_write) return -EINVAL;
    q->granted_write = 0;
    uint64_t w = LOAD_RELAXED(q->write_ctr); /* our own counter */
    if (w % q->quantum != 0) return -EPROTO;
    STORE_RELEASE(q->write_ctr, w + n * q->quantum); /* S1 */
    return 0;
}

static int begin_read_unguarded(nnb_fmq_t *q, uint64_t n, nnb_region_t *regions) {
    memset(regions, 0, 2 * sizeof *regions);
    q->granted_read = 0;
    uint64_t pos;
    int rc = prepare_read(q, n, &pos);
    if (rc) return rc;
    regions_at(q, pos, n, regions);
    q->granted_read = n;
    return 0;
}

static int commit_read_unguarded(nnb_fmq_t *q, uint64_t n) {
    if (n > q->granted_read) return -EINVAL;
    q->granted_read = 0;
    uint64_t r = LOAD_RELAXED(q->read_ctr); /* our own counter */
    if (q->flavor == NNB_FLAVOR_UNSYNCHRONIZED) {
        int rc = lapped_during_copy(q, r);
        if (rc) return rc;
    }
    STORE_RELEASE(q->read_ctr, r + n * q->quantum); /* S2 */
    return 0;
}

/* Public entry points: the unguarded operations above, run between enter()
 * and leave() (see nnb_enter in fmq_internal.h). */

void nnb_fmq_shutdown(nnb_fmq_t *q) { __atomic_store_n(&q->shut, 1, __ATOMIC_SEQ_CST); }

int nnb_fmq_calls_inside(nnb_fmq_t *q) { return (int)__atomic_load_n(&q->inside, __ATOMIC_ACQUIRE); }

#define GUARDED(q, call)              \
    do {                              \
        int64_t guard_rc = nnb_enter(q); \
        if (guard_rc) return guard_rc;   \
        guard_rc = (call);               \
        nnb_leave(q);                    \
        return guard_rc;                 \
    } while (0)

int64_t nnb_fmq_available_to_read(nnb_fmq_t *q) { GUARDED(q, nnb_fmq_readable(q)); }
int64_t nnb_fmq_available_to_write(nnb_fmq_t *q) { GUARDED(q, nnb_fmq_writable(q)); }
int nnb_fmq_write(nnb_fmq_t *q, const void *src, uint64_t n) { GUARDED(q, write_unguarded(q, src, n)); }
int nnb_fmq_read(nnb_fmq_t *q, void *dst, uint64_t n) { GUARDED(q, read_unguarded(q, dst, n)); }
int nnb_fmq_begin_write(nnb_fmq_t *q, uint64_t n, nnb_region_t *regions) {
    GUARDED(q, begin_write_unguarded(q, n, regions));
}
int nnb_fmq_commit_write(nnb_fmq_t *q, uint64_t n) { GUARDED(q, commit_write_unguarded(q, n)); }
int nnb_fmq_begin_read(nnb_fmq_t *q, uint64_t n, nnb_region_t *regions) {
    GUARDED(q, begin_read_unguarded(q, n, regions));
}
int nnb_fmq_commit_read(nnb_fmq_t *q, uint64_t n) { GUARDED(q, commit_read_unguarded(q, n)); }
