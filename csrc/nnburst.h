/*
 * nnburst C core: the whole C API in one header.
 *
 * C owns the mechanism only: a single-producer/single-consumer ring on
 * memory the caller mapped, 64-bit byte counters, a futex event-flag word,
 * spin-then-wait loops and bulk copies.  It never maps, allocates, logs or
 * prints.  Every function returns 0 or a negative errno:
 *
 *   -EAGAIN     would block (not enough data or space)
 *   -ETIMEDOUT  the deadline passed
 *   -EINTR      a signal arrived; the caller checks signals and retries
 *   -EINVAL     bad argument (count larger than the ring, wrong flavor, ...)
 *   -EPROTO     the shared header or counters are corrupt (hostile peer)
 *   -EOVERFLOW  unsynchronized reader was overrun; it resumed at the newest half
 *   -EPIPE      the teardown bit is set: the queue is being closed
 *   -EBADF      this handle was shut down (nnb_fmq_shutdown) by its owner
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
#ifndef NNBURST_H
#define NNBURST_H

#include <stddef.h>
#include <stdint.h>

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

#define NNB_EAGAIN -11
#define NNB_ETIMEDOUT -110
#define NNB_EINTR -4
#define NNB_EINVAL -22
#define NNB_EPROTO -71
#define NNB_EOVERFLOW -75
#define NNB_EPIPE -32
#define NNB_EBADF -9

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

/* Raise malloc's mmap and trim thresholds (heap.c, glibc only; else
 * -ENOSYS) so freed tensors stay in the heap for the next execution.
 * -EINVAL for a value malloc refuses (the mmap threshold's ceiling is
 * 32 MiB on 64-bit glibc). */
int nnb_keep_freed_memory(int64_t mmap_threshold, int64_t trim_threshold);

/* The geometry of a float32 NHWC convolution or pooling (kernels.c). */
struct nnb_window_shape {
    int64_t batches, in_h, in_w, in_c;
    int64_t filter_h, filter_w, stride_h, stride_w, dilation_h, dilation_w;
    int64_t pad_top, pad_bottom, pad_left, pad_right; /* implicit zeros (CONV_2D only) */
    int64_t out_h, out_w, out_c;
};

/* 2-D convolution on float32 NHWC (kernels.c): out[b, y, x, o] = bias[o] +
 * sum over i, j, c of in[b, y*stride_h + i*dilation_h - pad_top, x*stride_w
 * + j*dilation_w - pad_left, c] * weights[(i*filter_w + j)*in_c + c, o],
 * clamped to [lo, hi]; the input reads as zero outside its rows and columns
 * (the shape's pads, each at most 2^30).  weights has weight_cols columns,
 * a multiple of 16 and at least out_c (the extra ones zero, so that every
 * load reads whole 16-float tiles), and bias out_c entries; all arrays are
 * C-contiguous.  -EINVAL for a shape whose windows would reach outside the
 * padded input, -ENOMEM when the row of zeros cannot be had.  path picks
 * the loop: NNB_CONV_BEST the fastest this CPU runs, the others one build
 * of it (tests run each), -ENOTSUP when this CPU or build has not got it. */
#define NNB_CONV_BEST 0
#define NNB_CONV_PORTABLE 1
#define NNB_CONV_AVX2 2
#define NNB_CONV_AVX512 3
int nnb_conv_f32(const float *in, const struct nnb_window_shape *shape, const float *weights,
                 int64_t weight_cols, const float *bias, float lo, float hi, float *out,
                 int path);
/* Depthwise 2-D convolution on float32 NHWC (kernels.c): out[b, y, x, c] =
 * bias[c] + sum over i, j of in[b, y*stride_h + i*dilation_h, x*stride_w +
 * j*dilation_w, c] * weights[i, j, c], clamped to [lo, hi], for c below
 * out_c, reading zeros for the shape's padding (rows y*stride_h - pad_top
 * + ..., columns likewise).  in has in_c channels, at least out_c and at
 * least 16 (a narrower input is padded with zero channels), so that every
 * load reads a whole 16-channel tile;
 * weights is
 * [filter_h, filter_w, weight_c] and bias [weight_c], weight_c a multiple
 * of 16 and at least out_c (zeros past it); out has out_c channels.  All
 * arrays are C-contiguous.  -EINVAL for a shape whose windows would reach
 * outside the input; path as for nnb_conv_f32. */
int nnb_depthwise_conv_f32(const float *in, const struct nnb_window_shape *shape,
                           const float *weights, int64_t weight_c, const float *bias, float lo,
                           float hi, float *out, int path);

/* Max or sum pooling on float32 NHWC (kernels.c): out[b, y, x, c] = max
 * (NNB_POOL_MAX; NaN if any is NaN) or sum (NNB_POOL_SUM) over i, j of
 * in[b, y*stride_h + i*dilation_h, x*stride_w + j*dilation_w, c].  The
 * input is already padded (the shape's pads are 0); the shape's filter is
 * the window and its in_c and out_c are both the channel count.  -EINVAL for a shape whose windows
 * would reach outside the input. */
#define NNB_POOL_MAX 1
#define NNB_POOL_SUM 2
int nnb_pool_f32(const float *in, const struct nnb_window_shape *shape, int kind, float *out);
/* ADD of a tensor and a zero-padded copy of another, in one pass, as the
 * residual blocks of MobileNet-style detectors write it (PAD of the last
 * axis, then ADD with a fused activation): for every pixel p and channel
 * c < channels, out[p, c] = clamp(a[p, c] + (c < x_channels ? x[p, c] : 0),
 * lo, hi), where a and out hold `channels` and x holds `x_channels` floats
 * per pixel.  The clamp keeps NaN, as np.maximum/np.minimum do.  -EINVAL
 * for null pointers or x_channels > channels. */
int nnb_add_padded_channels_f32(const float *a, const float *x, uint64_t pixels,
                                uint32_t channels, uint32_t x_channels, float lo, float hi,
                                float *out);
/* The requantization of a quantized convolution or fully connected layer,
 * as NNAPI's reference does it, in one pass: for every row p and channel c,
 * total = acc[p, c] + bias[c], then out[p, c] = clamp(zero_point +
 * MultiplyByQuantizedMultiplier(total, multipliers[c], shifts[c]), lo, hi):
 * a saturating left shift by max(shift, 0) to int32, gemmlowp's
 * SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT by
 * max(-shift, 0).  acc holds exact integers in float32 (a loop of this file
 * summed them); multipliers and shifts have `channels` entries, or one for
 * all (per_channel 0).  out is uint8 (NNB_OUT_UINT8) or int8
 * (NNB_OUT_INT8), [rows, channels].  -EINVAL for null pointers, an unknown
 * out type, bounds outside it, or a shift outside [-31, 30]. */
#define NNB_OUT_UINT8 1
#define NNB_OUT_INT8 2
int nnb_requantize_f32(const float *acc, uint64_t rows, uint32_t channels, const int64_t *bias,
                       const int64_t *multipliers, const int64_t *shifts, int per_channel,
                       int32_t zero_point, int32_t lo, int32_t hi, int out_type, void *out);
/* Quantized ADD (SUB: ADD with the second multiplier negated) and MUL on
 * 8-bit data (kernels.c), as a table of all 65536 pairs of input bytes
 * (256 x 256 bytes; the 8-bit inputs make every output one of them), each
 * entry by NNAPI's reference integer steps:
 *   ADD: x = (a - zero_point_a) * 2^left_shift, likewise y for b; v =
 *        MultiplyByQuantizedMultiplier(x, multiplier_a, shift_a) + the same
 *        of y with multiplier_b, shift_b;
 *   MUL: v = (a - zero_point_a) * (b - zero_point_b);
 * then clamp(zero_point_out + MultiplyByQuantizedMultiplier(v, multiplier,
 * shift), lo, hi) (see nnb_requantize_f32 for the steps).  Inputs and
 * output are all of `type` (NNB_OUT_UINT8 or NNB_OUT_INT8); table[a_byte *
 * 256 + b_byte] is the output's byte.  -EINVAL for null pointers, an
 * unknown kind or type, zero points or bounds outside the type, a shift
 * outside [-31, 30] or a left_shift outside [0, 24]. */
#define NNB_QUANT_ADD 1
#define NNB_QUANT_MUL 2
struct nnb_quant_binary {
    int32_t kind, type;
    int32_t zero_point_a, zero_point_b, zero_point_out;
    int32_t left_shift, multiplier_a, shift_a, multiplier_b, shift_b; /* ADD only */
    int32_t multiplier, shift, lo, hi;
};
int nnb_quant_binary_table(const struct nnb_quant_binary *params, uint8_t *table);
/* out[i] = table[a[i] * 256 + b[i % b_count]] for i < count: a table of
 * nnb_quant_binary_table applied to bytes.  a and out hold count bytes, b
 * holds b_count that repeat along a (b_count == count for two tensors of
 * one shape, 1 for a scalar, the last axis for a per-channel operand);
 * table 65536.  -EINVAL for null pointers or a b_count that is 0 or does
 * not divide count. */
int nnb_quant_binary_lookup(const uint8_t *a, uint64_t count, const uint8_t *b, uint64_t b_count,
                            const uint8_t *table, uint8_t *out);
/* Quantized SOFTMAX over the last axis of [rows, depth] 8-bit data (type as
 * above), the reference's fixed point (cpu/ops/activation.py) with the
 * exponentials looked up: exps[k] is exp(-k input steps times beta) in
 * Q0.31, for k in 0..255 (256 entries), and an element more than radius
 * steps below its row's maximum counts as exp 0 and comes out as the
 * type's minimum.  Per row: the Q12.19 exps summed with int32 wrap-around,
 * its reciprocal by gemmlowp's one_over_one_plus_x_for_x_in_0_1, each
 * output exp times that, rounded to 1/256 steps (zero point 0 for uint8,
 * -128 for int8) and clamped.  -EINVAL for null pointers, depth 0 or an
 * unknown type. */
int nnb_softmax_quant8(const void *in, uint64_t rows, uint32_t depth, const int32_t *exps,
                       int64_t radius, int type, void *out);
/* QUANTIZE of float32 to 8 bits (out_type as above): out = clamp(round(in
 * / scale) + zero_point) with the division and addition in float32, round
 * half away from zero (std::round), the clamp to the type's range and a NaN
 * to its top (as std::min(hi, NaN) keeps hi).  -EINVAL for null pointers or
 * an unknown type. */
int nnb_quantize_f32(const float *in, uint64_t count, float scale, int32_t zero_point,
                     int out_type, void *out);
/* cffi cdef end */

#endif /* NNBURST_H */
