/* A plan: a run of operations executed as one C call over the caller's
 * tensors and an arena of intermediates (plan.c; built by
 * csrc/build_ffi.py, planned by nnburst/cpu/plan.py).  The convolutions,
 * pools and the 8-bit table lookups call the kernels of kernels.h,
 * qconv.h and fconv.h; the moves (copies, fills), the elementwise loops and
 * the float transposed convolution are here. */
#ifndef NNBURST_PLAN_H
#define NNBURST_PLAN_H

#include <stdint.h>

#include "fconv.h"
#include "kernels.h"
#include "qconv.h"
#include "threadpool.h"

/* cffi cdef begin */
/* What one step computes.  The elementwise kinds work over count floats and
 * clamp their result to [lo, hi] (the fused activation; +-inf for none). */
#define NNB_PLAN_ADD 0
#define NNB_PLAN_SUB 1
#define NNB_PLAN_MUL 2
#define NNB_PLAN_DIV 3
#define NNB_PLAN_MAXIMUM 4
#define NNB_PLAN_MINIMUM 5
#define NNB_PLAN_CLAMP 6      /* out = a (RELU, RELU1, RELU6: the clamp alone) */
#define NNB_PLAN_HARD_SWISH 7 /* out = a * min(max(a + 3, 0), 6) / 6 */
/* The others read their fixed arguments from params (the struct named). */
#define NNB_PLAN_CONV 8         /* nnb_plan_conv: nnb_conv_f32 of a into out */
#define NNB_PLAN_DEPTHWISE 9    /* nnb_plan_conv: nnb_depthwise_conv_f32; b: scratch */
#define NNB_PLAN_QCONV 10       /* nnb_plan_qconv: nnb_qconv_run; b: scratch */
#define NNB_PLAN_QDEPTHWISE 11  /* nnb_plan_qconv: nnb_qdwconv_run; b: scratch */
#define NNB_PLAN_COPY 12        /* nnb_plan_copy: a strided block of a into out */
#define NNB_PLAN_FILL 13        /* nnb_plan_fill: count elements of out set to one value */
#define NNB_PLAN_POOL 14        /* nnb_plan_pool: nnb_pool_f32, then / counts, clamp */
#define NNB_PLAN_QLOOKUP 15     /* nnb_plan_lookup: nnb_quant_binary_lookup(a, b) */
#define NNB_PLAN_PADDED_ADD 16  /* nnb_add_padded_channels_f32: a + b's channels */
#define NNB_PLAN_SOFTMAX_Q8 17  /* nnb_plan_softmax: nnb_softmax_quant8 over rows of a */
#define NNB_PLAN_AVERAGE_Q8 18  /* nnb_plan_average: quantized AVERAGE_POOL_2D */
#define NNB_PLAN_PRELU 19       /* nnb_plan_broadcast: out = a >= 0 ? a : a * b (float32) */
#define NNB_PLAN_QUANTIZE 20    /* nnb_plan_quantize: nnb_quantize_f32 of count floats */
#define NNB_PLAN_DEQUANTIZE 21  /* nnb_plan_quantize: out = (float)(a - zero_point) * scale */
#define NNB_PLAN_FCONV 22       /* nnb_plan_fconv: nnb_fconv_run; b: scratch */
#define NNB_PLAN_FDWCONV 23     /* nnb_plan_fconv: nnb_fdwconv_run; b: scratch */
#define NNB_PLAN_MEAN 24        /* nnb_plan_mean: a's mean over a middle block of axes; b: scratch */
#define NNB_PLAN_SOFTMAX 25     /* nnb_plan_softmax_f32: float32 softmax over rows of a */
#define NNB_PLAN_SQRT 26        /* out = sqrtf(a), count floats; params NULL */
#define NNB_PLAN_LOGISTIC 27    /* out = 1 / (1 + expf(-a)) in float, count floats; params NULL */
#define NNB_PLAN_RESIZE_BILINEAR 28 /* nnb_plan_resize: float32 NHWC bilinear resize */
#define NNB_PLAN_TRANSPOSE_CONV 29  /* nnb_plan_transpose_conv: float32 NHWC TRANSPOSE_CONV_2D */
#define NNB_PLAN_KINDS 30
/* Not a computation: the steps after it may split across threads
 * (nnb_plan_threads; a, b and count unused, out 0).  Numbered apart from
 * the kinds above so that new kinds keep their numbers. */
#define NNB_PLAN_THREADS 63

/* The binary elementwise kinds (ADD..MINIMUM) may take one, and PRELU
 * must: b then holds b_count floats, and element k of a pairs with b[(k /
 * b_inner) % b_count] (a per-channel operand: b_inner 1 in NHWC, the pixels
 * of a channel in NCHW); count must be a multiple of b_count * b_inner.
 * b_step is then unused. */
typedef struct {
    int64_t b_count, b_inner;
} nnb_plan_broadcast;

/* CONV, DEPTHWISE: the kernel's arguments.  A depthwise input narrower than
 * the kernel's 16-channel tiles (source_c < shape.in_c) is copied into the
 * scratch b with zero channels after its own; otherwise source_c ==
 * shape.in_c and b is unused. */
typedef struct {
    struct nnb_window_shape shape;
    const float *weights;
    int64_t weight_cols;
    const float *bias;
    int64_t source_c;
    float lo, hi;
    int32_t path, reserved;
} nnb_plan_conv;

/* QCONV, QDEPTHWISE: a packed layer (qconv.h) over `batches` images; b is
 * scratch_bytes of the arena. */
typedef struct {
    const struct nnb_qconv *layer;
    const void *packed;
    int64_t packed_bytes;
    int64_t batches;
    int64_t scratch_bytes;
    int32_t path, reserved;
} nnb_plan_qconv;

/* FCONV, FDWCONV: a packed float32 layer (fconv.h) over `batches` images; b
 * is scratch_bytes of the arena (its blocks are 64-byte aligned, more than
 * the pointer alignment nnb_fconv_run asks of its scratch). */
typedef struct {
    const struct nnb_fconv *layer;
    const void *packed;
    int64_t packed_bytes;
    int64_t batches;
    int64_t scratch_bytes;
    int32_t path, reserved;
} nnb_plan_fconv;

/* COPY: for every index i of extent[0..rank), element a_offset + sum(i[k] *
 * a_stride[k]) of a to element out_offset + sum(i[k] * out_stride[k]) of
 * out, elements of elem_bytes (1, 2, 4 or 8); a stride of a may be negative
 * (a reversed slice), out's not.  CONCATENATION, SLICE, STRIDED_SLICE, PAD's
 * interior, TRANSPOSE and RESHAPE are all this. */
#define NNB_PLAN_MAX_RANK 6
typedef struct {
    int32_t rank, elem_bytes;
    int64_t extent[6]; /* NNB_PLAN_MAX_RANK */
    int64_t a_stride[6]; /* NNB_PLAN_MAX_RANK */
    int64_t out_stride[6]; /* NNB_PLAN_MAX_RANK */
    int64_t a_offset, out_offset;
} nnb_plan_copy;

/* FILL: the first elem_bytes of value, count times. */
typedef struct {
    uint8_t value[8];
    int32_t elem_bytes, reserved;
} nnb_plan_fill;

/* POOL: nnb_pool_f32 (pool_kind NNB_POOL_MAX or NNB_POOL_SUM) over an
 * already padded a, then out / counts[pixel] when counts is not NULL
 * (an average: one count per output pixel of an image), then the clamp
 * [lo, hi]. */
typedef struct {
    struct nnb_window_shape shape;
    const float *counts;
    int32_t pool_kind, reserved;
    float lo, hi;
} nnb_plan_pool;

/* QLOOKUP: out[i] = table[a[i] * 256 + b[i % b_count]] for i < count. */
typedef struct {
    const uint8_t *table;
    int64_t b_count;
} nnb_plan_lookup;

/* PADDED_ADD: a holds channels floats per pixel, b x_channels; count is
 * pixels * channels; the clamp is the step's [lo, hi]. */
typedef struct {
    int64_t channels, x_channels;
} nnb_plan_padded_add;

/* SOFTMAX_Q8: count bytes of a as rows of depth, exps 256 entries, type
 * NNB_OUT_UINT8 or NNB_OUT_INT8 (kernels.h). */
typedef struct {
    const int32_t *exps;
    int64_t radius, depth;
    int32_t type, reserved;
} nnb_plan_softmax;

/* AVERAGE_Q8: the reference's quantized average pool on 8-bit NHWC data
 * (type NNB_OUT_UINT8 or NNB_OUT_INT8): per output pixel and channel, the
 * sum of the stored values under the window's part inside the input (the
 * shape's pads count as absent, not as zeros), divided by the number of
 * those taps rounding half away from zero, clamped to [lo, hi].  The shape's
 * dilations must be 1, in_c == out_c. */
typedef struct {
    struct nnb_window_shape shape;
    int32_t type, lo, hi, reserved;
} nnb_plan_average;

/* QUANTIZE, DEQUANTIZE: the 8-bit side's scale, zero point and type
 * (NNB_OUT_UINT8 or NNB_OUT_INT8); count elements. */
typedef struct {
    float scale;
    int32_t zero_point, type, reserved;
} nnb_plan_quantize;

/* MEAN: a is [outer, reduce, inner] float32, out [outer, inner]:
 * out[o, i] = (float)(sum over r of (double)a[o, r, i] / reduce), the sum
 * in r's order; count is outer * inner; b is scratch of inner doubles. */
typedef struct {
    int64_t outer, reduce, inner;
} nnb_plan_mean;

/* SOFTMAX (float32): count floats of a as rows of depth; in double, per
 * row, e = exp((a - max(row)) * beta) and out = (float)(e / sum(e)), the
 * sum in the row's order. */
typedef struct {
    int64_t depth;
    double beta;
} nnb_plan_softmax_f32;

/* RESIZE_BILINEAR: a [batches, in_h, in_w, channels] float32, out [batches,
 * out_h, out_w, channels]; per output row its taps' rows y0, y1 and weight
 * dy, per output column x0, x1 and dx (worked out by the planner as the
 * operation does); each output, in float32 and this order:
 * a00 (1-dy)(1-dx) + a10 dy (1-dx) + a01 (1-dy) dx + a11 dy dx. */
typedef struct {
    int64_t batches, in_h, in_w, channels, out_h, out_w;
    const int64_t *y0, *y1, *x0, *x1;
    const float *dy, *dx;
} nnb_plan_resize;

/* TRANSPOSE_CONV: a [batches, in_h, in_w, in_c] float32, out [batches,
 * out_h, out_w, out_c] (count floats).  Input pixel (y, x) times weights
 * [in_c, filter_h, filter_w, out_c] spreads over the canvas rows y *
 * stride_h + [0, filter_h) and columns x * stride_w + [0, filter_w); out is
 * the canvas from row pad_top and column pad_left on (what falls outside
 * is dropped; out rows or columns past the canvas, a negative tail
 * padding, hold the bias alone), plus bias [out_c], clamped to the step's
 * [lo, hi].  weight_count must be in_c * filter_h * filter_w * out_c.
 * nchw 1: a is
 * [batches, in_c, in_h, in_w] and out [batches, out_c, out_h, out_w]
 * instead.  narrow 1: the sums run along input rows (for a few out_c; 0:
 * along out_c).  b is nnb_plan_transpose_conv_scratch bytes of the arena
 * when that is not 0 (rows in the layouts the loops want). */
typedef struct {
    int64_t batches, in_h, in_w, in_c, out_h, out_w, out_c;
    int64_t filter_h, filter_w, stride_h, stride_w, pad_top, pad_left;
    const float *weights;
    int64_t weight_count;
    const float *bias;
    int32_t narrow, nchw;
} nnb_plan_transpose_conv;

/* The scratch bytes a TRANSPOSE_CONV step's b holds (0: none). */
int64_t nnb_plan_transpose_conv_scratch(const nnb_plan_transpose_conv *c);

/* THREADS: the convolutions after it (CONV, DEPTHWISE, QCONV, QDEPTHWISE,
 * FCONV, FDWCONV; a fully connected layer is one of these over `batches`
 * rows) of at least min_work multiply-adds run on up to `threads` threads
 * (threadpool.h; at most nnb_threads_set's count), split by output rows:
 * each thread calls the step's kernel over whole rows of the output, so
 * every output element is computed by the same code as on one thread and
 * the results are the same bits.  threads 1: one thread from here on. */
typedef struct {
    int32_t threads;
    int32_t slices; /* per thread (1..16): a step is cut into threads * slices runs of rows,
                       taken one at a time, so a worker the scheduler holds back keeps
                       little of the step from the others */
    int64_t min_work;
} nnb_plan_threads;

/* A tensor of a step: arena + ref bytes for ref >= 0, else the caller's
 * tensor tensors[-1 - ref]. */
typedef struct {
    int32_t kind;
    int32_t a_step; /* elementwise: 1: a has count floats; 0: a has one, read for each */
    int32_t b_step; /* likewise for b (unused by CLAMP and HARD_SWISH) */
    int32_t reserved;
    int64_t a, b, out;
    int64_t count;
    float lo, hi;
    const void *params; /* the kind's struct; NULL for the elementwise kinds */
} nnb_plan_step;

/* Whether steps[0..count) fit an arena of arena_bytes and the caller's
 * tensors of tensor_bytes[0..tensor_count): every byte a step reads or
 * writes (worked out from its kind, count and params) lies inside the
 * buffer its reference names, every kind exists, every geometry is sane
 * (positive sizes, windows inside their inputs, ranks and element sizes in
 * range) and no step writes over what it reads but in place elementwise.
 * 0, or -EINVAL naming nothing: the planner gets a clear refusal at build
 * time, the run none of the kernels' undefined behaviour. */
int nnb_plan_check(const nnb_plan_step *steps, int64_t count, int64_t arena_bytes,
                   const int64_t *tensor_bytes, int64_t tensor_count);

/* Runs steps[0..count) in order.  The caller has had nnb_plan_check accept
 * these same steps, arena_bytes and tensor_bytes, and has not changed them
 * since (they are not re-checked: see plan.c); it passes tensors of at least
 * tensor_bytes[i] bytes each.  arena holds arena_bytes (the plan's
 * intermediates, each 64-byte aligned by the planner).  A NULL where bytes
 * are needed is -EINVAL, nothing written.  deadline_ns, an absolute
 * CLOCK_MONOTONIC time (0 or negative: none), is read before every step:
 * past it the run stops with -ETIMEDOUT, the steps before it done.  A
 * kernel's own error (-ENOMEM for the row of zeros of nnb_conv_f32, say)
 * stops the run and is returned.  The caller owns every buffer for the
 * call's length; a step after a THREADS step may hand slices of its output
 * to the kernel threads, which only read its inputs, params and packed
 * layer and write their own rows (plus their own scratch), and the step
 * returns only once every slice is done (threadpool.c orders those writes
 * before the return).  Two runs at once on different threads are fine:
 * the second's steps run on its own thread while the first holds the
 * workers. */
int nnb_plan_run(const nnb_plan_step *steps, int64_t count, void *arena, int64_t arena_bytes,
                 void *const *tensors, const int64_t *tensor_bytes, int64_t tensor_count,
                 int64_t deadline_ns);
/* cffi cdef end */

#endif
