/* One C call for a run of operations (plan.h).
 *
 * The Python executor costs ~1 us per operation before any arithmetic;
 * here a step costs a few nanoseconds plus its loop.  Each elementwise step
 * computes exactly what numpy computes for the operation (one IEEE
 * operation per element, no contraction across steps), and the clamp
 * propagates NaN as np.maximum / np.minimum do: a NaN compares false and
 * stays (MAXIMUM and MINIMUM themselves keep their first operand where
 * either is NaN, as std::max / std::min and the run loop do).  The other steps call the kernels the operations' bound paths
 * call (kernels.h, qconv.h, fconv.h) with the same arguments, so a plan's results
 * are the operations' bit for bit; but for the float TRANSPOSE_CONV_2D, whose
 * operation is numpy's matrix product and scatter: its loop here sums in
 * another order (within float32 rounding).
 *
 * Every step is checked before the first runs (nnb_plan_check): the bytes
 * it reads and writes, worked out here from its kind and parameters, must
 * lie in the buffers its references name.  The kernels check their own
 * arguments again; a plan never trusts the planner. */

#include "plan.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

/* Sizes beyond this are refused: products of a few of them stay in int64. */
#define DIM_LIMIT ((int64_t)1 << 31)

static void *tensor_at(int64_t ref, void *arena, void *const *tensors)
{
    return ref >= 0 ? (uint8_t *)arena + ref : tensors[-1 - ref];
}

struct buffers {
    int64_t arena_bytes;
    const int64_t *tensor_bytes;
    int64_t tensor_count;
};

/* Whether ref names bytes [ref, ref + bytes) inside the arena or the caller's tensor. */
static int fits(int64_t ref, int64_t bytes, const struct buffers *in)
{
    if (bytes < 0)
        return 0;
    if (ref >= 0)
        return ref <= in->arena_bytes && bytes <= in->arena_bytes - ref;
    if (ref < -in->tensor_count)
        return 0;
    return bytes <= in->tensor_bytes[-1 - ref];
}

/* Whether [a, a + a_bytes) and [b, b + b_bytes) of the same buffer overlap. */
static int overlap(int64_t a, int64_t a_bytes, int64_t b, int64_t b_bytes)
{
    if ((a < 0) != (b < 0))
        return 0; /* one in the arena, the other a caller's tensor */
    if (a < 0)
        return a == b; /* caller's tensors are distinct arrays */
    return a < b + b_bytes && b < a + a_bytes;
}

static int dim(int64_t v) { return v >= 1 && v < DIM_LIMIT; }

/* The windows of one axis inside the padded input: the last window's last
 * tap is row (out - 1) * stride + (filter - 1) * dilation of the padded input. */
static int axis_fits(int64_t in, int64_t pad_before, int64_t pad_after, int64_t out,
                     int64_t filter, int64_t stride, int64_t dilation)
{
    if (!dim(in) || !dim(out) || !dim(filter) || !dim(stride) || !dim(dilation) ||
        pad_before < 0 || pad_after < 0 || pad_before >= DIM_LIMIT || pad_after >= DIM_LIMIT)
        return 0;
    return (out - 1) * stride + (filter - 1) * dilation < in + pad_before + pad_after;
}

static int window_fits(const struct nnb_window_shape *s)
{
    return dim(s->batches) && dim(s->in_c) && dim(s->out_c) &&
           axis_fits(s->in_h, s->pad_top, s->pad_bottom, s->out_h, s->filter_h, s->stride_h,
                     s->dilation_h) &&
           axis_fits(s->in_w, s->pad_left, s->pad_right, s->out_w, s->filter_w, s->stride_w,
                     s->dilation_w) &&
           s->batches * s->in_h < DIM_LIMIT && s->in_w * s->in_c < DIM_LIMIT &&
           s->batches * s->out_h < DIM_LIMIT && s->out_w * s->out_c < DIM_LIMIT;
}

static int64_t in_floats(const struct nnb_window_shape *s, int64_t channels)
{
    return s->batches * s->in_h * s->in_w * channels;
}

static int64_t out_floats(const struct nnb_window_shape *s)
{
    return s->batches * s->out_h * s->out_w * s->out_c;
}

/* The lowest and one past the highest element a copy's strides reach from
 * offset; 0 when they do not stay in int64's comfort. */
static int copy_reach(const nnb_plan_copy *c, const int64_t *stride, int64_t offset,
                      int64_t *lowest, int64_t *end)
{
    int64_t lo = offset, hi = offset;
    for (int k = 0; k < c->rank; k++) {
        if (!dim(c->extent[k]) || stride[k] <= -DIM_LIMIT || stride[k] >= DIM_LIMIT)
            return 0;
        const int64_t span = (c->extent[k] - 1) * stride[k];
        if (span < 0)
            lo += span;
        else
            hi += span;
        if (lo <= -DIM_LIMIT * 4 || hi >= DIM_LIMIT * 4)
            return 0;
    }
    *lowest = lo, *end = hi + 1;
    return 1;
}

static int elem_size(int32_t bytes) { return bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8; }

/* What step s reads from a and b and writes to out, in bytes (-1: unused),
 * or 0 for a step that makes no sense whatever the buffers. */
static int step_bytes(const nnb_plan_step *s, int64_t *a, int64_t *b, int64_t *out)
{
    *a = *b = *out = -1;
    if (s->kind == NNB_PLAN_THREADS) { /* reads and writes nothing: out 0 bytes at 0 */
        const nnb_plan_threads *t = s->params;
        if (t == NULL || t->threads < 1 || t->threads > NNB_THREADS_MAX || t->slices < 1 ||
            t->slices > 16 || t->min_work < 0 || s->out != 0)
            return 0;
        *out = 0;
        return 1;
    }
    if (s->kind < 0 || s->kind >= NNB_PLAN_KINDS || s->count < 0)
        return 0;
    if (s->kind <= NNB_PLAN_HARD_SWISH || s->kind == NNB_PLAN_PRELU) {
        const nnb_plan_broadcast *br = s->params;
        const int binary = s->kind <= NNB_PLAN_MINIMUM || s->kind == NNB_PLAN_PRELU;
        if ((s->a_step != 0 && s->a_step != 1) || (s->b_step != 0 && s->b_step != 1) ||
            s->count >= DIM_LIMIT * 4 || (br != NULL && !binary) ||
            (br == NULL && s->kind == NNB_PLAN_PRELU))
            return 0;
        *out = s->count * 4;
        *a = (s->a_step ? s->count : 1) * 4;
        if (br != NULL) {
            if (!s->a_step || !dim(br->b_count) || !dim(br->b_inner) ||
                br->b_count * br->b_inner >= DIM_LIMIT * 4 ||
                s->count % (br->b_count * br->b_inner) != 0)
                return 0;
            *b = br->b_count * 4;
        } else if (binary) {
            *b = (s->b_step ? s->count : 1) * 4;
        }
        return 1;
    }
    if (s->kind == NNB_PLAN_SQRT || s->kind == NNB_PLAN_LOGISTIC) {
        if (s->params != NULL || s->count >= DIM_LIMIT * 4)
            return 0;
        *a = *out = s->count * 4;
        return 1;
    }
    if (s->params == NULL)
        return 0;
    switch (s->kind) {
    case NNB_PLAN_CONV:
    case NNB_PLAN_DEPTHWISE: {
        const nnb_plan_conv *c = s->params;
        const struct nnb_window_shape *w = &c->shape;
        if (!window_fits(w) || c->weights == NULL || c->bias == NULL || c->weight_cols < w->out_c ||
            c->weight_cols % 16 != 0 || c->weight_cols >= DIM_LIMIT)
            return 0;
        if (s->kind == NNB_PLAN_CONV) {
            if (c->source_c != w->in_c)
                return 0;
        } else if (w->in_c < 16 || w->in_c < w->out_c || !dim(c->source_c) ||
                   c->source_c > w->in_c || c->source_c != w->out_c) {
            return 0;
        }
        *a = in_floats(w, c->source_c) * 4;
        *out = out_floats(w) * 4;
        if (c->source_c < w->in_c)
            *b = in_floats(w, w->in_c) * 4;
        return 1;
    }
    case NNB_PLAN_QCONV:
    case NNB_PLAN_QDEPTHWISE: {
        const nnb_plan_qconv *q = s->params;
        const struct nnb_qconv *l = q->layer;
        if (l == NULL || q->packed == NULL || !dim(q->batches))
            return 0;
        const int depthwise = s->kind == NNB_PLAN_QDEPTHWISE;
        const int64_t packed = depthwise ? nnb_qdwconv_packed_bytes(l) : nnb_qconv_packed_bytes(l);
        const int64_t scratch = depthwise ? nnb_qdwconv_scratch_bytes(l) : nnb_qconv_scratch_bytes(l);
        if (packed < 0 || scratch < 0 || packed != q->packed_bytes || q->scratch_bytes < scratch)
            return 0;
        if (!dim(l->in_h) || !dim(l->in_w) || !dim(l->in_c) || !dim(l->out_h) || !dim(l->out_w) ||
            !dim(l->out_c) || q->batches * l->in_h >= DIM_LIMIT || l->in_w * l->in_c >= DIM_LIMIT ||
            q->batches * l->out_h >= DIM_LIMIT || l->out_w * l->out_c >= DIM_LIMIT)
            return 0;
        *a = q->batches * l->in_h * l->in_w * l->in_c;
        *out = q->batches * l->out_h * l->out_w * l->out_c *
               (l->output_type == NNB_QCONV_INT16 ? 2 : 1); /* an element's bytes */
        *b = q->scratch_bytes;
        return 1;
    }
    case NNB_PLAN_FCONV:
    case NNB_PLAN_FDWCONV: {
        const nnb_plan_fconv *f = s->params;
        const struct nnb_fconv *l = f->layer;
        if (l == NULL || f->packed == NULL || !dim(f->batches))
            return 0;
        const int depthwise = s->kind == NNB_PLAN_FDWCONV;
        const int64_t packed = depthwise ? nnb_fdwconv_packed_bytes(l) : nnb_fconv_packed_bytes(l);
        const int64_t scratch = depthwise ? nnb_fdwconv_scratch_bytes(l) : nnb_fconv_scratch_bytes(l);
        if (packed < 0 || scratch < 0 || packed != f->packed_bytes || f->scratch_bytes < scratch)
            return 0;
        if (!dim(l->in_h) || !dim(l->in_w) || !dim(l->in_c) || !dim(l->out_h) || !dim(l->out_w) ||
            !dim(l->out_c) || f->batches * l->in_h >= DIM_LIMIT || l->in_w * l->in_c >= DIM_LIMIT ||
            f->batches * l->out_h >= DIM_LIMIT || l->out_w * l->out_c >= DIM_LIMIT)
            return 0;
        const int64_t in_floats = f->batches * l->in_h * l->in_w * l->in_c;
        const int64_t out_floats = f->batches * l->out_h * l->out_w * l->out_c;
        if (in_floats >= DIM_LIMIT * 4 || out_floats >= DIM_LIMIT * 4)
            return 0;
        *a = in_floats * 4;
        *out = out_floats * 4;
        *b = f->scratch_bytes;
        return 1;
    }
    case NNB_PLAN_COPY: {
        const nnb_plan_copy *c = s->params;
        int64_t a_lo, a_end, out_lo, out_end;
        if (c->rank < 0 || c->rank > NNB_PLAN_MAX_RANK || !elem_size(c->elem_bytes))
            return 0;
        for (int k = 0; k < c->rank; k++)
            if (c->out_stride[k] < 0)
                return 0;
        if (!copy_reach(c, c->a_stride, c->a_offset, &a_lo, &a_end) ||
            !copy_reach(c, c->out_stride, c->out_offset, &out_lo, &out_end) || a_lo < 0 ||
            out_lo < 0)
            return 0;
        *a = a_end * c->elem_bytes;
        *out = out_end * c->elem_bytes;
        return 1;
    }
    case NNB_PLAN_FILL: {
        const nnb_plan_fill *f = s->params;
        if (!elem_size(f->elem_bytes) || s->count >= DIM_LIMIT * 4)
            return 0;
        *out = s->count * f->elem_bytes;
        return 1;
    }
    case NNB_PLAN_POOL: {
        const nnb_plan_pool *p = s->params;
        const struct nnb_window_shape *w = &p->shape;
        if (!window_fits(w) || w->in_c != w->out_c || w->pad_top || w->pad_bottom ||
            w->pad_left || w->pad_right ||
            (p->pool_kind != NNB_POOL_MAX && p->pool_kind != NNB_POOL_SUM))
            return 0;
        *a = in_floats(w, w->in_c) * 4;
        *out = out_floats(w) * 4;
        return 1;
    }
    case NNB_PLAN_QLOOKUP: {
        const nnb_plan_lookup *l = s->params;
        if (l->table == NULL || !dim(l->b_count) || s->count >= DIM_LIMIT * 4 ||
            s->count % l->b_count != 0)
            return 0;
        *a = *out = s->count;
        *b = l->b_count;
        return 1;
    }
    case NNB_PLAN_SOFTMAX_Q8: {
        const nnb_plan_softmax *m = s->params;
        if (m->exps == NULL || !dim(m->depth) || m->depth > UINT32_MAX ||
            s->count >= DIM_LIMIT * 4 || s->count % m->depth != 0 ||
            (m->type != NNB_OUT_UINT8 && m->type != NNB_OUT_INT8))
            return 0;
        *a = *out = s->count;
        return 1;
    }
    case NNB_PLAN_AVERAGE_Q8: {
        const nnb_plan_average *m = s->params;
        const struct nnb_window_shape *w = &m->shape;
        if (!window_fits(w) || w->in_c != w->out_c || w->dilation_h != 1 || w->dilation_w != 1 ||
            w->filter_h * w->filter_w >= (1 << 23) ||
            (m->type != NNB_OUT_UINT8 && m->type != NNB_OUT_INT8) || m->lo > m->hi)
            return 0;
        *a = in_floats(w, w->in_c);
        *out = out_floats(w);
        return 1;
    }
    case NNB_PLAN_QUANTIZE:
    case NNB_PLAN_DEQUANTIZE: {
        const nnb_plan_quantize *q = s->params;
        if ((q->type != NNB_OUT_UINT8 && q->type != NNB_OUT_INT8) || s->count >= DIM_LIMIT * 4)
            return 0;
        *a = s->kind == NNB_PLAN_QUANTIZE ? s->count * 4 : s->count;
        *out = s->kind == NNB_PLAN_QUANTIZE ? s->count : s->count * 4;
        return 1;
    }
    case NNB_PLAN_MEAN: {
        const nnb_plan_mean *m = s->params;
        if (s->b < 0 || s->b % 8 != 0 || !dim(m->outer) || !dim(m->reduce) || !dim(m->inner) ||
            m->outer * m->inner != s->count || m->outer * m->inner >= DIM_LIMIT * 4 ||
            m->reduce * m->inner >= DIM_LIMIT * 4 ||
            m->outer * m->reduce >= DIM_LIMIT * 4 / m->inner)
            return 0;
        *a = m->outer * m->reduce * m->inner * 4;
        *out = s->count * 4;
        *b = m->inner * 8;
        return 1;
    }
    case NNB_PLAN_SOFTMAX: {
        const nnb_plan_softmax_f32 *m = s->params;
        if (!dim(m->depth) || s->count >= DIM_LIMIT * 4 || s->count % m->depth != 0 ||
            !isfinite(m->beta))
            return 0;
        *a = *out = s->count * 4;
        return 1;
    }
    case NNB_PLAN_RESIZE_BILINEAR: {
        const nnb_plan_resize *r = s->params;
        if (!dim(r->batches) || !dim(r->in_h) || !dim(r->in_w) || !dim(r->channels) ||
            !dim(r->out_h) || !dim(r->out_w) || r->y0 == NULL || r->y1 == NULL ||
            r->x0 == NULL || r->x1 == NULL || r->dy == NULL || r->dx == NULL ||
            r->batches * r->in_h >= DIM_LIMIT || r->in_w * r->channels >= DIM_LIMIT ||
            r->batches * r->out_h >= DIM_LIMIT || r->out_w * r->channels >= DIM_LIMIT ||
            s->count != r->batches * r->out_h * r->out_w * r->channels)
            return 0;
        for (int64_t k = 0; k < r->out_h; k++)
            if (r->y0[k] < 0 || r->y0[k] >= r->in_h || r->y1[k] < 0 || r->y1[k] >= r->in_h)
                return 0;
        for (int64_t k = 0; k < r->out_w; k++)
            if (r->x0[k] < 0 || r->x0[k] >= r->in_w || r->x1[k] < 0 || r->x1[k] >= r->in_w)
                return 0;
        *a = r->batches * r->in_h * r->in_w * r->channels * 4;
        *out = s->count * 4;
        return 1;
    }
    case NNB_PLAN_TRANSPOSE_CONV: {
        const nnb_plan_transpose_conv *c = s->params;
        if (!dim(c->batches) || !dim(c->in_h) || !dim(c->in_w) || !dim(c->in_c) ||
            !dim(c->out_h) || !dim(c->out_w) || !dim(c->out_c) || !dim(c->filter_h) ||
            !dim(c->filter_w) || !dim(c->stride_h) || !dim(c->stride_w) || c->pad_top < 0 ||
            c->pad_top >= DIM_LIMIT || c->pad_left < 0 || c->pad_left >= DIM_LIMIT ||
            c->weights == NULL || c->bias == NULL || c->batches * c->in_h >= DIM_LIMIT ||
            c->in_w * c->in_c >= DIM_LIMIT || c->batches * c->out_h >= DIM_LIMIT ||
            c->out_w * c->out_c >= DIM_LIMIT || c->filter_h * c->filter_w >= DIM_LIMIT ||
            c->filter_w * c->out_c >= DIM_LIMIT)
            return 0;
        const int64_t in_floats = c->batches * c->in_h * c->in_w * c->in_c;
        const int64_t out_floats = c->batches * c->out_h * c->out_w * c->out_c;
        const int64_t tap_floats = c->filter_h * c->filter_w * c->out_c;
        if (in_floats >= DIM_LIMIT * 4 || out_floats >= DIM_LIMIT * 4 ||
            tap_floats >= DIM_LIMIT * 4 || c->in_c >= DIM_LIMIT * 4 / tap_floats ||
            c->weight_count != c->in_c * tap_floats || s->count != out_floats ||
            (c->narrow != 0 && c->narrow != 1) || (c->nchw != 0 && c->nchw != 1))
            return 0;
        *a = in_floats * 4;
        *out = out_floats * 4;
        const int64_t scratch = nnb_plan_transpose_conv_scratch(c);
        if (scratch > 0) { /* floats in the arena */
            if (s->b < 0 || s->b % 4 != 0)
                return 0;
            *b = scratch;
        }
        return 1;
    }
    default: { /* NNB_PLAN_PADDED_ADD */
        const nnb_plan_padded_add *p = s->params;
        if (!dim(p->channels) || !dim(p->x_channels) || p->x_channels > p->channels ||
            p->channels > UINT32_MAX || s->count % p->channels != 0 || s->count >= DIM_LIMIT * 4)
            return 0;
        *a = *out = s->count * 4;
        *b = s->count / p->channels * p->x_channels * 4;
        return 1;
    }
    }
}

static int check(const nnb_plan_step *s, const struct buffers *in)
{
    int64_t a, b, out;
    if (!step_bytes(s, &a, &b, &out) || !fits(s->out, out, in))
        return 0;
    if (a >= 0 && !fits(s->a, a, in))
        return 0;
    if (b >= 0 && !fits(s->b, b, in))
        return 0;
    if (s->kind <= NNB_PLAN_HARD_SWISH || s->kind == NNB_PLAN_PRELU) {
        /* An output may overwrite an input element by element only in place. */
        if ((s->out == s->a && !s->a_step) ||
            (b >= 0 && s->out == s->b && (!s->b_step || s->params != NULL)))
            return 0;
        if ((s->out != s->a && overlap(s->out, out, s->a, a)) ||
            (b >= 0 && s->out != s->b && overlap(s->out, out, s->b, b)))
            return 0;
        return 1;
    }
    if (a >= 0 && overlap(s->out, out, s->a, a))
        return 0;
    return b < 0 || (!overlap(s->out, out, s->b, b) && (a < 0 || !overlap(s->a, a, s->b, b) ||
                                                           s->kind == NNB_PLAN_QLOOKUP ||
                                                           s->kind == NNB_PLAN_PADDED_ADD));
}

int nnb_plan_check(const nnb_plan_step *steps, int64_t count, int64_t arena_bytes,
                   const int64_t *tensor_bytes, int64_t tensor_count)
{
    if (count < 0 || arena_bytes < 0 || tensor_count < 0 || (count && steps == NULL) ||
        (tensor_count && tensor_bytes == NULL))
        return -EINVAL;
    const struct buffers in = {arena_bytes, tensor_bytes, tensor_count};
    for (int64_t i = 0; i < count; i++)
        if (!check(&steps[i], &in))
            return -EINVAL;
    return 0;
}

static float clamped(float v, float lo, float hi)
{
    v = v < lo ? lo : v; /* NaN < lo is false: a NaN stays, as in np.maximum */
    return v > hi ? hi : v;
}

/* MAXIMUM / MINIMUM as the CPU driver computes them (elementwise.py):
 * std::max / std::min, which hand back a when either is NaN. */
static float maximum(float a, float b) { return a < b ? b : a; }

static float minimum(float a, float b) { return b < a ? b : a; }

/* The elementwise and broadcast loops vectorise; an AVX2 clone (picked by
 * the loader where the CPU has it, as kernels.c's MACHINE_CLONES: AVX2
 * alone, no FMA, so no contraction and the same bits) does 8 floats a step
 * where the baseline does 4.  FMA_CLONES adds FMA (Haswell's set), for the
 * float transposed convolution, whose sums are not bit for bit anyway. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
#define PLAN_CLONES __attribute__((target_clones("avx2", "default")))
#define FMA_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define PLAN_CLONES
#define FMA_CLONES
#endif

PLAN_CLONES static void elementwise(const nnb_plan_step *s, const float *a, const float *b,
                                    float *out)
{
    const int64_t as = s->a_step, bs = s->b_step, n = s->count;
    const float lo = s->lo, hi = s->hi;
    switch (s->kind) {
    case NNB_PLAN_ADD:
        for (int64_t k = 0; k < n; k++)
            out[k] = clamped(a[k * as] + b[k * bs], lo, hi);
        break;
    case NNB_PLAN_SUB:
        for (int64_t k = 0; k < n; k++)
            out[k] = clamped(a[k * as] - b[k * bs], lo, hi);
        break;
    case NNB_PLAN_MUL:
        for (int64_t k = 0; k < n; k++)
            out[k] = clamped(a[k * as] * b[k * bs], lo, hi);
        break;
    case NNB_PLAN_DIV:
        for (int64_t k = 0; k < n; k++)
            out[k] = clamped(a[k * as] / b[k * bs], lo, hi);
        break;
    case NNB_PLAN_MAXIMUM:
        for (int64_t k = 0; k < n; k++)
            out[k] = clamped(maximum(a[k * as], b[k * bs]), lo, hi);
        break;
    case NNB_PLAN_MINIMUM:
        for (int64_t k = 0; k < n; k++)
            out[k] = clamped(minimum(a[k * as], b[k * bs]), lo, hi);
        break;
    case NNB_PLAN_CLAMP:
        for (int64_t k = 0; k < n; k++)
            out[k] = clamped(a[k * as], lo, hi);
        break;
    default: /* NNB_PLAN_HARD_SWISH: hard_swish's bound kernel, step by step */
        for (int64_t k = 0; k < n; k++) {
            const float x = a[k * as];
            float g = x + 3.0f;
            g = g < 0.0f ? 0.0f : g;
            g = g > 6.0f ? 6.0f : g;
            out[k] = clamped(x * g / 6.0f, lo, hi);
        }
        break;
    }
}

/* A binary step whose b repeats per channel (nnb_plan_broadcast): the kind
 * chosen once, then plain loops the compiler vectorises, over the channels
 * of a row (b_inner 1: NHWC) or over the pixels of a channel (NCHW). */
#define BROADCAST_LOOPS(expr)                                                                     \
    do {                                                                                          \
        if (inner == 1) {                                                                         \
            for (int64_t r = 0; r < rows; r++) {                                                  \
                const float *x_ = a + r * channels;                                               \
                float *o_ = out + r * channels;                                                   \
                for (int64_t c = 0; c < channels; c++) {                                          \
                    const float x = x_[c], y = b[c];                                              \
                    o_[c] = clamped(expr, lo, hi);                                                \
                }                                                                                 \
            }                                                                                     \
        } else {                                                                                  \
            for (int64_t r = 0; r < rows; r++)                                                    \
                for (int64_t c = 0; c < channels; c++) {                                          \
                    const float y = b[c];                                                         \
                    const float *x_ = a + (r * channels + c) * inner;                             \
                    float *o_ = out + (r * channels + c) * inner;                                 \
                    for (int64_t i = 0; i < inner; i++) {                                         \
                        const float x = x_[i];                                                    \
                        o_[i] = clamped(expr, lo, hi);                                            \
                    }                                                                             \
                }                                                                                 \
        }                                                                                         \
    } while (0)

/* PRELU's value, x where x >= 0 (or NaN) else x * y, as a select of bits:
 * written with ?: GCC sinks the product into its branch and, under
 * -ftrapping-math, will not take it unconditionally again, so the loop
 * kept a branch (mispredicted on every other element of signed data: 5x
 * slower than this, which it vectorises). */
static inline float prelu(float x, float y)
{
    const float scaled = x * y;
    uint32_t bits, scaled_bits;
    memcpy(&bits, &x, sizeof bits);
    memcpy(&scaled_bits, &scaled, sizeof scaled_bits);
    const uint32_t negative = -(uint32_t)(x < 0.0f);
    bits = (scaled_bits & negative) | (bits & ~negative);
    float result;
    memcpy(&result, &bits, sizeof result);
    return result;
}

PLAN_CLONES static void broadcast(const nnb_plan_step *s, const float *a, const float *b,
                                  float *out)
{
    const nnb_plan_broadcast *br = s->params;
    const int64_t inner = br->b_inner, channels = br->b_count;
    const int64_t rows = s->count / (inner * channels);
    const float lo = s->lo, hi = s->hi;
    switch (s->kind) {
    case NNB_PLAN_ADD: BROADCAST_LOOPS(x + y); break;
    case NNB_PLAN_SUB: BROADCAST_LOOPS(x - y); break;
    case NNB_PLAN_MUL: BROADCAST_LOOPS(x * y); break;
    case NNB_PLAN_DIV: BROADCAST_LOOPS(x / y); break;
    case NNB_PLAN_MAXIMUM: BROADCAST_LOOPS(maximum(x, y)); break;
    case NNB_PLAN_MINIMUM: BROADCAST_LOOPS(minimum(x, y)); break;
    default: BROADCAST_LOOPS(prelu(x, y)); break; /* NNB_PLAN_PRELU */
    }
}

/* One row of a copy, element by element through memcpy (the buffers need
 * not be aligned to the element: the compiler makes each a plain move). */
#define strided_row(type, a, out, ai, oi, as, os, inner)                                         \
    do {                                                                                          \
        for (int64_t k_ = 0; k_ < (inner); k_++)                                                  \
            memcpy((out) + ((oi) + k_ * (os)) * sizeof(type), (a) + ((ai) + k_ * (as)) * sizeof(type), \
                   sizeof(type));                                                                 \
    } while (0)

/* The copy's innermost axis with unit strides is one memcpy per row. */
static void copy(const nnb_plan_copy *c, const uint8_t *a, uint8_t *out)
{
    const int rank = c->rank, e = c->elem_bytes;
    int64_t index[NNB_PLAN_MAX_RANK] = {0};
    if (rank == 0) {
        memcpy(out + c->out_offset * e, a + c->a_offset * e, (size_t)e);
        return;
    }
    const int64_t inner = c->extent[rank - 1];
    const int64_t as = c->a_stride[rank - 1], os = c->out_stride[rank - 1];
    const int contiguous = as == 1 && os == 1;
    for (;;) {
        int64_t ai = c->a_offset, oi = c->out_offset;
        for (int k = 0; k < rank - 1; k++)
            ai += index[k] * c->a_stride[k], oi += index[k] * c->out_stride[k];
        if (contiguous)
            memcpy(out + oi * e, a + ai * e, (size_t)(inner * e));
        else if (e == 4)
            strided_row(uint32_t, a, out, ai, oi, as, os, inner);
        else if (e == 1)
            strided_row(uint8_t, a, out, ai, oi, as, os, inner);
        else if (e == 2)
            strided_row(uint16_t, a, out, ai, oi, as, os, inner);
        else
            strided_row(uint64_t, a, out, ai, oi, as, os, inner);
        int k = rank - 2;
        while (k >= 0 && ++index[k] == c->extent[k])
            index[k--] = 0;
        if (k < 0)
            return;
    }
}

static void fill(const nnb_plan_fill *f, int64_t count, uint8_t *out)
{
    const int e = f->elem_bytes;
    int zero = 1;
    for (int k = 0; k < e; k++)
        zero &= f->value[k] == 0;
    if (zero) {
        memset(out, 0, (size_t)(count * e));
        return;
    }
    if (e == 1) {
        memset(out, f->value[0], (size_t)count);
        return;
    }
    for (int64_t k = 0; k < count; k++)
        memcpy(out + k * e, f->value, (size_t)e);
}

static int pool(const nnb_plan_pool *p, const float *a, float *out)
{
    int rc = nnb_pool_f32(a, &p->shape, p->pool_kind, out);
    if (rc)
        return rc;
    const struct nnb_window_shape *w = &p->shape;
    const int64_t pixels = w->out_h * w->out_w, channels = w->out_c;
    for (int64_t n = 0; n < w->batches; n++)
        for (int64_t q = 0; q < pixels; q++) {
            float *o = out + (n * pixels + q) * channels;
            if (p->counts != NULL) {
                const float count = p->counts[q];
                for (int64_t c = 0; c < channels; c++)
                    o[c] = clamped(o[c] / count, p->lo, p->hi);
            } else {
                for (int64_t c = 0; c < channels; c++)
                    o[c] = clamped(o[c], p->lo, p->hi);
            }
        }
    return 0;
}

/* The taps [first, end) of one window along an axis that lie inside the input. */
static void taps(int64_t o, int64_t stride, int64_t pad, int64_t filter, int64_t size,
                 int64_t *first, int64_t *end)
{
    const int64_t start = o * stride - pad;
    *first = start < 0 ? 0 : start;
    *end = start + filter < size ? start + filter : size;
}

static int32_t stored(const void *a, int type, int64_t k)
{
    return type == NNB_OUT_INT8 ? ((const int8_t *)a)[k] : ((const uint8_t *)a)[k];
}

static void average_q8(const nnb_plan_average *m, const void *a, void *out)
{
    const struct nnb_window_shape *w = &m->shape;
    const int64_t channels = w->in_c;
    for (int64_t n = 0; n < w->batches; n++)
        for (int64_t oy = 0; oy < w->out_h; oy++)
            for (int64_t ox = 0; ox < w->out_w; ox++) {
                int64_t y0, y1, x0, x1;
                taps(oy, w->stride_h, w->pad_top, w->filter_h, w->in_h, &y0, &y1);
                taps(ox, w->stride_w, w->pad_left, w->filter_w, w->in_w, &x0, &x1);
                const int64_t count = (y1 > y0 ? y1 - y0 : 0) * (x1 > x0 ? x1 - x0 : 0);
                const int64_t o = ((n * w->out_h + oy) * w->out_w + ox) * channels;
                for (int64_t c = 0; c < channels; c++) {
                    int64_t sum = 0;
                    for (int64_t y = y0; y < y1; y++)
                        for (int64_t x = x0; x < x1; x++)
                            sum += stored(a, m->type, ((n * w->in_h + y) * w->in_w + x) * channels + c);
                    int64_t v = 0;
                    if (count > 0) {
                        const int64_t half = count / 2;
                        v = sum >= 0 ? (sum + half) / count : -((half - sum) / count);
                    }
                    v = v < m->lo ? m->lo : v > m->hi ? m->hi : v;
                    if (m->type == NNB_OUT_INT8)
                        ((int8_t *)out)[o + c] = (int8_t)v;
                    else
                        ((uint8_t *)out)[o + c] = (uint8_t)v;
                }
            }
}

/* MEAN: each output the sum of its reduce inputs, in double, in their
 * order, divided by reduce in double (MEAN's float path: float64 sums). */
static void mean(const nnb_plan_mean *m, const float *a, float *out, double *sums)
{
    const int64_t inner = m->inner;
    for (int64_t o = 0; o < m->outer; o++) {
        const float *x = a + o * m->reduce * inner;
        for (int64_t i = 0; i < inner; i++)
            sums[i] = 0.0;
        for (int64_t r = 0; r < m->reduce; r++)
            for (int64_t i = 0; i < inner; i++)
                sums[i] += (double)x[r * inner + i];
        for (int64_t i = 0; i < inner; i++)
            out[o * inner + i] = (float)(sums[i] / (double)m->reduce);
    }
}

/* SOFTMAX over rows of depth floats, in double as the operation computes it;
 * a row's exponentials are kept in out as floats only after the sum. */
static void softmax(const nnb_plan_softmax_f32 *m, int64_t count, const float *a, float *out)
{
    const int64_t depth = m->depth;
    for (int64_t row = 0; row < count / depth; row++) {
        const float *x = a + row * depth;
        float *y = out + row * depth;
        double top = x[0], sum = 0.0;
        for (int64_t k = 1; k < depth; k++)
            top = x[k] > top ? x[k] : top; /* a NaN anywhere makes the sum, so the row, NaN */
        for (int64_t k = 0; k < depth; k++)
            sum += exp(((double)x[k] - top) * m->beta);
        for (int64_t k = 0; k < depth; k++)
            y[k] = (float)(exp(((double)x[k] - top) * m->beta) / sum);
    }
}

/* RESIZE_BILINEAR as the operation computes it (resize.py), term by term. */
static void resize_bilinear(const nnb_plan_resize *r, const float *a, float *out)
{
    const int64_t c = r->channels;
    for (int64_t n = 0; n < r->batches; n++)
        for (int64_t oy = 0; oy < r->out_h; oy++) {
            const float fy = r->dy[oy], gy = 1.0f - fy;
            const float *row0 = a + (n * r->in_h + r->y0[oy]) * r->in_w * c;
            const float *row1 = a + (n * r->in_h + r->y1[oy]) * r->in_w * c;
            for (int64_t ox = 0; ox < r->out_w; ox++) {
                const float fx = r->dx[ox], gx = 1.0f - fx;
                const float *p00 = row0 + r->x0[ox] * c, *p10 = row1 + r->x0[ox] * c;
                const float *p01 = row0 + r->x1[ox] * c, *p11 = row1 + r->x1[ox] * c;
                float *o = out + ((n * r->out_h + oy) * r->out_w + ox) * c;
                for (int64_t k = 0; k < c; k++)
                    o[k] = p00[k] * gy * gx + p10[k] * fy * gx + p01[k] * gy * fx +
                           p11[k] * fy * fx;
            }
        }
}

/* TRANSPOSE_CONV_2D (plan.h), one output row at a time: the row zeroed,
 * then for each filter row i that lands on it (canvas row oy + pad_top ==
 * y * stride_h + i) input row y adds its taps (i, j) that fall inside the
 * row, then bias and clamp.  Wide outputs (spread): each input value times
 * the weights of one pixel's taps is one contiguous multiply-add of up to
 * filter_w * out_c floats (the taps are neighbours in the row and in the
 * weights).  Narrow ones: per tap (i, j) and output channel, the sums of a
 * whole input row at once, one multiply-add of in_w floats per input
 * channel (its NCHW plane's row), then added where each pixel's tap lands.
 * The compiler vectorises both (an AVX2+FMA clone where the CPU has it).
 * The sums run in another order than the operation's matrix product and
 * scatter: equal within float32 rounding, not bit for bit. */

int64_t nnb_plan_transpose_conv_scratch(const nnb_plan_transpose_conv *c)
{
    int64_t floats = 0;
    if (c->nchw)
        floats += c->out_w * c->out_c; /* the output row, NHWC */
    if (c->nchw != c->narrow)
        floats += c->in_w * c->in_c; /* the input row in the other layout */
    if (c->narrow)
        floats += c->in_w; /* one tap's sums over the input row */
    return floats * 4;
}

/* The pixel v's contribution to length outputs o through weights w
 * ([in_c] rows stride floats apart, length floats used of each). */
static inline void spread(const float *v, int64_t in_c, const float *w, int64_t stride,
                          int64_t length, float *restrict o)
{
    for (int64_t k = 0; k < in_c; k++, w += stride) {
        const float value = v[k];
        for (int64_t e = 0; e < length; e++)
            o[e] += value * w[e];
    }
}

/* Input row y of image n, NCHW to NHWC ([in_w][in_c]) or NHWC to NCHW
 * planes ([in_c][in_w]), into to. */
static void regather(const nnb_plan_transpose_conv *c, const float *a, int64_t n, int64_t y,
                     float *restrict to)
{
    const int64_t in_c = c->in_c, in_w = c->in_w;
    if (c->nchw) {
        for (int64_t k = 0; k < in_c; k++) {
            const float *plane = a + ((n * in_c + k) * c->in_h + y) * in_w;
            for (int64_t x = 0; x < in_w; x++)
                to[x * in_c + k] = plane[x];
        }
    } else {
        const float *pixels = a + (n * c->in_h + y) * in_w * in_c;
        for (int64_t x = 0; x < in_w; x++)
            for (int64_t k = 0; k < in_c; k++)
                to[k * in_w + x] = pixels[x * in_c + k];
    }
}

/* Narrow: filter row i's taps over input row y (planes: channel k's row at
 * planes + k * plane_stride) added into row. */
static inline void narrow_taps(const nnb_plan_transpose_conv *c, int64_t i, const float *planes,
                               int64_t plane_stride, float *restrict sums, float *restrict row)
{
    const int64_t in_c = c->in_c, in_w = c->in_w, out_c = c->out_c, fw = c->filter_w;
    const int64_t tap_floats = c->filter_h * fw * out_c;
    for (int64_t j = 0; j < fw; j++)
        for (int64_t e = 0; e < out_c; e++) {
            const float *w = c->weights + (i * fw + j) * out_c + e;
            memset(sums, 0, (size_t)in_w * sizeof(float));
            for (int64_t k = 0; k < in_c; k++) {
                const float value = w[k * tap_floats];
                const float *plane = planes + k * plane_stride;
                for (int64_t x = 0; x < in_w; x++)
                    sums[x] += value * plane[x];
            }
            for (int64_t x = 0; x < in_w; x++) {
                const int64_t ox = x * c->stride_w + j - c->pad_left;
                if (ox >= 0 && ox < c->out_w)
                    row[ox * out_c + e] += sums[x];
            }
        }
}

FMA_CLONES static void transpose_conv(const nnb_plan_transpose_conv *c, const float *a, float lo,
                                      float hi, float *out, float *scratch)
{
    const int64_t in_c = c->in_c, out_c = c->out_c, fw = c->filter_w, sh = c->stride_h;
    const int64_t sw = c->stride_w, row_floats = c->out_w * out_c;
    const int64_t tap_floats = c->filter_h * fw * out_c; /* one input channel's weights */
    /* scratch: [the NHWC output row (NCHW)] [the regathered input row] [the sums (narrow)] */
    float *regathered = scratch + (c->nchw ? row_floats : 0);
    float *sums = regathered + (c->nchw != c->narrow ? c->in_w * in_c : 0);
    for (int64_t n = 0; n < c->batches; n++)
        for (int64_t oy = 0; oy < c->out_h; oy++) {
            float *restrict row = c->nchw ? scratch : out + (n * c->out_h + oy) * row_floats;
            memset(row, 0, (size_t)row_floats * sizeof(float));
            const int64_t r = oy + c->pad_top; /* the canvas row */
            for (int64_t i = r % sh; i < c->filter_h && i <= r; i += sh) {
                const int64_t y = (r - i) / sh;
                if (y >= c->in_h)
                    continue;
                if (c->nchw != c->narrow)
                    regather(c, a, n, y, regathered);
                if (c->narrow) {
                    if (c->nchw)
                        narrow_taps(c, i, a + (n * in_c * c->in_h + y) * c->in_w,
                                    c->in_h * c->in_w, sums, row);
                    else
                        narrow_taps(c, i, regathered, c->in_w, sums, row);
                    continue;
                }
                const float *pixels =
                    c->nchw ? regathered : a + (n * c->in_h + y) * c->in_w * in_c;
                for (int64_t x = 0; x < c->in_w; x++) {
                    const int64_t first = x * sw - c->pad_left; /* tap 0's output column */
                    const int64_t j0 = first < 0 ? -first : 0;
                    const int64_t j1 = c->out_w - first < fw ? c->out_w - first : fw;
                    if (j0 >= j1)
                        continue;
                    float *restrict o = row + (first + j0) * out_c;
                    spread(pixels + x * in_c, in_c, c->weights + (i * fw + j0) * out_c, tap_floats,
                           (j1 - j0) * out_c, o);
                }
            }
            if (!c->nchw) {
                for (int64_t p = 0; p < row_floats; p += out_c)
                    for (int64_t e = 0; e < out_c; e++)
                        row[p + e] = clamped(row[p + e] + c->bias[e], lo, hi);
                continue;
            }
            for (int64_t e = 0; e < out_c; e++) {
                float *plane = out + ((n * out_c + e) * c->out_h + oy) * c->out_w;
                for (int64_t x = 0; x < c->out_w; x++)
                    plane[x] = clamped(row[x * out_c + e] + c->bias[e], lo, hi);
            }
        }
}

/* A depthwise input of source_c channels into the kernel's in_c: its own
 * channels, then zeros. */
static void widen(const nnb_plan_conv *c, const float *a, float *wide)
{
    const int64_t pixels = c->shape.batches * c->shape.in_h * c->shape.in_w;
    const int64_t from = c->source_c, to = c->shape.in_c;
    for (int64_t p = 0; p < pixels; p++) {
        memcpy(wide + p * to, a + p * from, (size_t)from * sizeof(float));
        memset(wide + p * to + from, 0, (size_t)(to - from) * sizeof(float));
    }
}

static int run_step(const nnb_plan_step *s, void *arena, void *const *tensors)
{
    void *out = tensor_at(s->out, arena, tensors);
    const void *a = tensor_at(s->a, arena, tensors);
    switch (s->kind) {
    case NNB_PLAN_CONV: {
        const nnb_plan_conv *c = s->params;
        return nnb_conv_f32(a, &c->shape, c->weights, c->weight_cols, c->bias, c->lo, c->hi, out,
                            c->path);
    }
    case NNB_PLAN_DEPTHWISE: {
        const nnb_plan_conv *c = s->params;
        if (c->source_c < c->shape.in_c) {
            float *wide = tensor_at(s->b, arena, tensors);
            widen(c, a, wide);
            a = wide;
        }
        return nnb_depthwise_conv_f32(a, &c->shape, c->weights, c->weight_cols, c->bias, c->lo,
                                      c->hi, out, c->path);
    }
    case NNB_PLAN_QCONV:
    case NNB_PLAN_QDEPTHWISE: {
        const nnb_plan_qconv *q = s->params;
        void *scratch = tensor_at(s->b, arena, tensors);
        if (s->kind == NNB_PLAN_QCONV)
            return nnb_qconv_run(q->layer, q->packed, q->packed_bytes, a, q->batches, out, scratch,
                                 q->scratch_bytes, q->path);
        return nnb_qdwconv_run(q->layer, q->packed, q->packed_bytes, a, q->batches, out, scratch,
                               q->scratch_bytes, q->path);
    }
    case NNB_PLAN_FCONV:
    case NNB_PLAN_FDWCONV: {
        const nnb_plan_fconv *f = s->params;
        void *scratch = tensor_at(s->b, arena, tensors);
        if (s->kind == NNB_PLAN_FCONV)
            return nnb_fconv_run(f->layer, f->packed, f->packed_bytes, a, f->batches, out, scratch,
                                 f->scratch_bytes, f->path);
        return nnb_fdwconv_run(f->layer, f->packed, f->packed_bytes, a, f->batches, out, scratch,
                               f->scratch_bytes, f->path);
    }
    case NNB_PLAN_COPY:
        copy(s->params, a, out);
        return 0;
    case NNB_PLAN_FILL:
        fill(s->params, s->count, out);
        return 0;
    case NNB_PLAN_POOL:
        return pool(s->params, a, out);
    case NNB_PLAN_QLOOKUP: {
        const nnb_plan_lookup *l = s->params;
        if (s->count == 0)
            return 0;
        return nnb_quant_binary_lookup(a, (uint64_t)s->count, tensor_at(s->b, arena, tensors),
                                       (uint64_t)l->b_count, l->table, out);
    }
    case NNB_PLAN_AVERAGE_Q8:
        average_q8(s->params, a, out);
        return 0;
    case NNB_PLAN_QUANTIZE: {
        const nnb_plan_quantize *q = s->params;
        if (s->count == 0)
            return 0;
        return nnb_quantize_f32(a, (uint64_t)s->count, q->scale, q->zero_point, q->type, out);
    }
    case NNB_PLAN_DEQUANTIZE: {
        const nnb_plan_quantize *q = s->params;
        float *f = out;
        for (int64_t k = 0; k < s->count; k++) /* an int32 difference times a float32 scale */
            f[k] = (float)(stored(a, q->type, k) - q->zero_point) * q->scale;
        return 0;
    }
    case NNB_PLAN_SOFTMAX_Q8: {
        const nnb_plan_softmax *m = s->params;
        if (s->count == 0)
            return 0;
        return nnb_softmax_quant8(a, (uint64_t)(s->count / m->depth), (uint32_t)m->depth, m->exps,
                                  m->radius, m->type, out);
    }
    case NNB_PLAN_MEAN:
        mean(s->params, a, out, tensor_at(s->b, arena, tensors));
        return 0;
    case NNB_PLAN_RESIZE_BILINEAR:
        resize_bilinear(s->params, a, out);
        return 0;
    case NNB_PLAN_TRANSPOSE_CONV:
        transpose_conv(s->params, a, s->lo, s->hi, out, tensor_at(s->b, arena, tensors));
        return 0;
    case NNB_PLAN_SQRT: {
        const float *x = a;
        float *y = out;
        for (int64_t k = 0; k < s->count; k++)
            y[k] = sqrtf(x[k]);
        return 0;
    }
    case NNB_PLAN_LOGISTIC: { /* LOGISTIC's float path: 1 / (1 + exp(-x)) in float32 */
        const float *x = a;
        float *y = out;
        for (int64_t k = 0; k < s->count; k++)
            y[k] = 1.0f / (1.0f + expf(-x[k]));
        return 0;
    }
    case NNB_PLAN_SOFTMAX:
        softmax(s->params, s->count, a, out);
        return 0;
    case NNB_PLAN_PADDED_ADD: {
        const nnb_plan_padded_add *p = s->params;
        return nnb_add_padded_channels_f32(a, tensor_at(s->b, arena, tensors),
                                           (uint64_t)(s->count / p->channels),
                                           (uint32_t)p->channels, (uint32_t)p->x_channels, s->lo,
                                           s->hi, out);
    }
    default: {
        const float *b = s->kind <= NNB_PLAN_MINIMUM || s->kind == NNB_PLAN_PRELU
                             ? tensor_at(s->b, arena, tensors)
                             : a;
        if (s->params != NULL)
            broadcast(s, a, b, out);
        else
            elementwise(s, a, b, out);
        return 0;
    }
    }
}

/* -- threads ---------------------------------------------------------------
 * A convolution step over several threads: its output rows (counted across
 * the batch, image after image) cut into one contiguous run per task, each
 * run computed by the step's own kernel on a sub-layer of just those rows.
 * Rows [y0, y1) of an image read input rows from y0 * stride_h - pad_top
 * on; the sub-layer starts its input there (or keeps the part of the top
 * padding it still reaches) and keeps the rest of the image below, so its
 * windows read exactly the taps, and the padding, that the whole layer's
 * windows of those rows read, through the same code: the same bits.  A run
 * of whole images is one call over them.  The packed weights and the
 * scratch sizes do not depend on the rows (fconv.c, qconv.c): each task
 * uses the step's packed layer, and its own scratch (the caller's is the
 * step's, a worker's its own). */

/* fconv.c's tile: nnb_fconv_run computes the pixels of a call (all its
 * images' rows, one after the other) 6 at a time, and a short last block's
 * pixels by another sum order (tile_one_avx2: 4 chains).  So an FCONV
 * slice must start on a pixel the whole call starts a block on, and end on
 * one or at the end: the blocks, hence the sums, are then the whole call's.
 * tests/test_plan_threads.py fails if fconv.c's blocks change under this. */
#define FCONV_BLOCK_PIXELS 6

/* The rows and the geometry a split needs, whatever the kernel. */
struct rows {
    int64_t images, out_h, out_w, in_h, stride_h, pad_top;
    int64_t in_image, out_image; /* bytes of an image of input and of output */
    int64_t in_row, out_row;     /* bytes of a row of each */
    int64_t last_start;          /* the last row whose windows start inside the input */
    int64_t block;               /* a slice starts on a multiple of this many pixels */
};

struct split {
    const nnb_plan_step *step;
    const uint8_t *a;
    uint8_t *out;
    void *scratch; /* the step's (participant 0) */
    int64_t scratch_bytes;
    struct rows r;
    int64_t tasks;
    int64_t bounds[NNB_THREADS_MAX * 16 + 1]; /* task t: rows [bounds[t], bounds[t + 1]) */
};

/* Whether row u of all images' rows may start a slice: a row whose windows
 * start below the input cannot (its sub-layer's input would be empty); an
 * FCONV slice starts on a block of the whole call's, and, with several
 * images, on an image (a slice across an image's end would be two calls,
 * each starting its own blocks). */
static int may_start(const struct rows *r, int64_t u)
{
    const int64_t y = u % r->out_h;
    if (y > r->last_start)
        return 0;
    if (r->block > 1)
        return u * r->out_w % r->block == 0 && (r->images == 1 || y == 0);
    return 1;
}

/* The tasks' row ranges: even cuts moved on to the next row that may start
 * a slice, empty ranges dropped; the number of ranges. */
static int64_t cut(struct split *p, int64_t tasks)
{
    const int64_t total = p->r.images * p->r.out_h;
    int64_t n = 0;
    p->bounds[0] = 0;
    for (int64_t t = 1; t < tasks; t++) {
        int64_t u = total * t / tasks;
        while (u < total && !may_start(&p->r, u))
            u++;
        if (u > p->bounds[n] && u < total)
            p->bounds[++n] = u;
    }
    p->bounds[++n] = total;
    return n;
}

/* Rows [y0, y1) of image n through the step's kernel (y1 - y0 == out_h
 * and images > 1: whole images, `images` of them). */
static int run_rows(const struct split *p, int64_t n, int64_t y0, int64_t y1, int64_t images,
                    void *scratch, int64_t scratch_bytes)
{
    const nnb_plan_step *s = p->step;
    const struct rows *r = &p->r;
    int64_t shift = y0 * r->stride_h - r->pad_top, pad_top = 0;
    if (shift < 0)
        pad_top = -shift, shift = 0;
    const uint8_t *a = p->a + n * r->in_image + shift * r->in_row;
    uint8_t *out = p->out + n * r->out_image + y0 * r->out_row;
    switch (s->kind) {
    case NNB_PLAN_FCONV:
    case NNB_PLAN_FDWCONV: {
        const nnb_plan_fconv *f = s->params;
        struct nnb_fconv sub = *f->layer;
        sub.in_h -= shift, sub.pad_top = pad_top, sub.out_h = y1 - y0;
        if (s->kind == NNB_PLAN_FCONV)
            return nnb_fconv_run(&sub, f->packed, f->packed_bytes, (const float *)a, images,
                                 (float *)out, scratch, scratch_bytes, f->path);
        return nnb_fdwconv_run(&sub, f->packed, f->packed_bytes, (const float *)a, images,
                               (float *)out, scratch, scratch_bytes, f->path);
    }
    case NNB_PLAN_QCONV:
    case NNB_PLAN_QDEPTHWISE: {
        const nnb_plan_qconv *q = s->params;
        struct nnb_qconv sub = *q->layer;
        sub.in_h -= shift, sub.pad_top = pad_top, sub.out_h = y1 - y0;
        if (s->kind == NNB_PLAN_QCONV)
            return nnb_qconv_run(&sub, q->packed, q->packed_bytes, a, images, out, scratch,
                                 scratch_bytes, q->path);
        return nnb_qdwconv_run(&sub, q->packed, q->packed_bytes, a, images, out, scratch,
                               scratch_bytes, q->path);
    }
    default: { /* CONV, DEPTHWISE (a widened input already in a) */
        const nnb_plan_conv *c = s->params;
        struct nnb_window_shape sub = c->shape;
        sub.batches = images;
        sub.in_h -= shift, sub.pad_top = pad_top, sub.out_h = y1 - y0;
        if (s->kind == NNB_PLAN_CONV)
            return nnb_conv_f32((const float *)a, &sub, c->weights, c->weight_cols, c->bias,
                                c->lo, c->hi, (float *)out, c->path);
        return nnb_depthwise_conv_f32((const float *)a, &sub, c->weights, c->weight_cols, c->bias,
                                      c->lo, c->hi, (float *)out, c->path);
    }
    }
}

/* Task t: its rows, image by image (whole images in one call). */
static int run_task(void *context, int64_t task, int participant)
{
    const struct split *p = context;
    const int64_t out_h = p->r.out_h;
    int64_t u = p->bounds[task];
    const int64_t end = p->bounds[task + 1];
    void *scratch = p->scratch;
    if (participant > 0 && p->scratch_bytes > 0 &&
        (scratch = nnb_threads_scratch(participant, p->scratch_bytes)) == NULL)
        return -ENOMEM;
    while (u < end) {
        const int64_t n = u / out_h, y0 = u % out_h;
        int rc;
        if (y0 == 0 && end - u >= out_h) { /* whole images */
            const int64_t images = (end - u) / out_h;
            rc = run_rows(p, n, 0, out_h, images, scratch, p->scratch_bytes);
            u += images * out_h;
        } else {
            const int64_t y1 = end - u < out_h - y0 ? y0 + (end - u) : out_h;
            rc = run_rows(p, n, y0, y1, 1, scratch, p->scratch_bytes);
            u += y1 - y0;
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* A step's rows and work (multiply-adds), when it is one the threads split. */
static int split_geometry(const nnb_plan_step *s, struct rows *r, int64_t *work,
                          int64_t *scratch_bytes)
{
    int64_t in_w, in_c, out_w, out_c, taps, in_elem = 1, out_elem = 1;
    int depthwise;
    switch (s->kind) {
    case NNB_PLAN_FCONV:
    case NNB_PLAN_FDWCONV: {
        const nnb_plan_fconv *f = s->params;
        const struct nnb_fconv *l = f->layer;
        r->images = f->batches, r->out_h = l->out_h, r->in_h = l->in_h;
        r->stride_h = l->stride_h, r->pad_top = l->pad_top;
        in_w = l->in_w, in_c = l->in_c, out_w = l->out_w, out_c = l->out_c;
        taps = l->filter_h * l->filter_w;
        in_elem = out_elem = 4;
        depthwise = s->kind == NNB_PLAN_FDWCONV;
        *scratch_bytes = f->scratch_bytes;
        break;
    }
    case NNB_PLAN_QCONV:
    case NNB_PLAN_QDEPTHWISE: {
        const nnb_plan_qconv *q = s->params;
        const struct nnb_qconv *l = q->layer;
        r->images = q->batches, r->out_h = l->out_h, r->in_h = l->in_h;
        r->stride_h = l->stride_h, r->pad_top = l->pad_top;
        in_w = l->in_w, in_c = l->in_c, out_w = l->out_w, out_c = l->out_c;
        taps = l->filter_h * l->filter_w;
        out_elem = l->output_type == NNB_QCONV_INT16 ? 2 : 1;
        depthwise = s->kind == NNB_PLAN_QDEPTHWISE;
        *scratch_bytes = q->scratch_bytes;
        break;
    }
    case NNB_PLAN_CONV:
    case NNB_PLAN_DEPTHWISE: {
        const nnb_plan_conv *c = s->params;
        const struct nnb_window_shape *w = &c->shape;
        r->images = w->batches, r->out_h = w->out_h, r->in_h = w->in_h;
        r->stride_h = w->stride_h, r->pad_top = w->pad_top;
        in_w = w->in_w, in_c = w->in_c, out_w = w->out_w, out_c = w->out_c;
        taps = w->filter_h * w->filter_w;
        in_elem = out_elem = 4;
        depthwise = s->kind == NNB_PLAN_DEPTHWISE;
        *scratch_bytes = 0;
        break;
    }
    default:
        return 0;
    }
    r->out_w = out_w;
    r->block = s->kind == NNB_PLAN_FCONV ? FCONV_BLOCK_PIXELS : 1;
    r->in_row = in_w * in_c * in_elem, r->out_row = out_w * out_c * out_elem;
    r->in_image = r->in_h * r->in_row, r->out_image = r->out_h * r->out_row;
    r->last_start = (r->in_h - 1 + r->pad_top) / r->stride_h;
    *work = r->images * r->out_h * out_w * out_c * taps * (depthwise ? 1 : in_c);
    return 1;
}

/* Step s on up to `threads` threads when it is a convolution of at least
 * min_work multiply-adds, else as run_step does. */
static int run_split(const nnb_plan_step *s, void *arena, void *const *tensors, int threads,
                     int slices, int64_t min_work)
{
    struct split p = {.step = s};
    int64_t work;
    if (!split_geometry(s, &p.r, &work, &p.scratch_bytes) || work < min_work)
        return run_step(s, arena, tensors);
    const int64_t rows = p.r.images * p.r.out_h;
    const int64_t runs = (int64_t)threads * slices;
    p.tasks = cut(&p, rows < runs ? rows : runs);
    if (p.tasks < 2)
        return run_step(s, arena, tensors);
    p.a = tensor_at(s->a, arena, tensors);
    p.out = tensor_at(s->out, arena, tensors);
    if (s->kind == NNB_PLAN_DEPTHWISE) {
        const nnb_plan_conv *c = s->params;
        if (c->source_c < c->shape.in_c) { /* widened once, by the caller, before the split */
            float *wide = tensor_at(s->b, arena, tensors);
            widen(c, (const float *)p.a, wide);
            p.a = (const uint8_t *)wide;
        }
    } else if (s->kind != NNB_PLAN_CONV) {
        p.scratch = tensor_at(s->b, arena, tensors);
    }
    return nnb_threads_run(threads, p.tasks, run_task, &p);
}

/* CLOCK_MONOTONIC now, in ns: the clock nnburst/deadlines.py and fmq.h measure on. */
static int64_t monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* No nnb_plan_check here: the caller checked these very tables once, when it
 * built them (nnburst/_bindings/plan.py's PlanTable does, and refuses to
 * exist otherwise), and the check's verdict cannot go stale: the steps, their
 * params and tensor_bytes live in memory this process allocated privately
 * (never a shared pool another process could write) and nothing writes them
 * after the build; a run only reads them.  What may differ per run (the
 * arena's and the tensors' addresses) is checked here, and sizing each
 * tensor at tensor_bytes[i] is the caller's part, as the header says.
 * Re-checking every run cost a pass over every step before any arithmetic. */
int nnb_plan_run(const nnb_plan_step *steps, int64_t count, void *arena, int64_t arena_bytes,
                 void *const *tensors, const int64_t *tensor_bytes, int64_t tensor_count,
                 int64_t deadline_ns)
{
    if (count < 0 || arena_bytes < 0 || tensor_count < 0 || (count && steps == NULL) ||
        (tensor_count && (tensor_bytes == NULL || tensors == NULL)) || (arena_bytes && arena == NULL))
        return -EINVAL;
    for (int64_t i = 0; i < tensor_count; i++)
        if (tensors[i] == NULL && tensor_bytes[i] > 0)
            return -EINVAL;
    int threads = 1, slices = 1;
    int64_t min_work = 0;
    for (int64_t i = 0; i < count; i++) {
        /* Between steps, never inside one: a step is a kernel call of bounded
         * length, and reading the clock costs ~20 ns, so only when asked. */
        if (deadline_ns > 0 && monotonic_ns() >= deadline_ns)
            return -ETIMEDOUT;
        const nnb_plan_step *s = &steps[i];
        if (s->kind == NNB_PLAN_THREADS) {
            const nnb_plan_threads *t = s->params;
            threads = t->threads, slices = t->slices, min_work = t->min_work;
            continue;
        }
        int rc = threads > 1 ? run_split(s, arena, tensors, threads, slices, min_work)
                             : run_step(s, arena, tensors);
        if (rc)
            return rc;
    }
    return 0;
}
