/* The C plan (plan.c) under ASan and UBSan: chains of random steps over
 * buffers allocated at exactly the sizes the tables give, checked against
 * the same arithmetic done here step by step, and tables reaching outside
 * their buffers refused before anything is written.  Usage: test_plan [RUNS]. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static float reference(int kind, float a, float b, float lo, float hi)
{
    float v;
    switch (kind) {
    case NNB_PLAN_ADD: v = a + b; break;
    case NNB_PLAN_SUB: v = a - b; break;
    case NNB_PLAN_MUL: v = a * b; break;
    case NNB_PLAN_DIV: v = a / b; break;
    case NNB_PLAN_MAXIMUM: v = a < b ? b : a; break; /* std::max */
    case NNB_PLAN_MINIMUM: v = b < a ? b : a; break; /* std::min */
    case NNB_PLAN_CLAMP: v = a; break;
    default: {
        float g = a + 3.0f;
        g = g < 0.0f ? 0.0f : g;
        g = g > 6.0f ? 6.0f : g;
        v = a * g / 6.0f;
    }
    }
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

/* A table is checked once, when built, and then run (plan.h): both, here. */
static int checked_run(const nnb_plan_step *steps, int64_t count, void *arena, int64_t arena_bytes,
                       void *const *tensors, const int64_t *bytes, int64_t tensor_count)
{
    int rc = nnb_plan_check(steps, count, arena_bytes, bytes, tensor_count);
    return rc ? rc : nnb_plan_run(steps, count, arena, arena_bytes, tensors, bytes, tensor_count, 0);
}

static int same(float a, float b) { return (isnan(a) && isnan(b)) || a == b; }

/* One random chain: input x (n floats), a one-float constant, steps into the
 * arena, the last into the output. */
static int random_chain(void)
{
    const int64_t n = 1 + rand() % 40, count = 1 + rand() % 12;
    const float bounds[4][2] = {{-INFINITY, INFINITY}, {0, INFINITY}, {-1, 1}, {0, 6}};
    float *x = malloc(sizeof(float) * (size_t)n), *c = malloc(sizeof(float));
    float *out = malloc(sizeof(float) * (size_t)n);
    float *arena = malloc(sizeof(float) * (size_t)(n * count));
    float *want = malloc(sizeof(float) * (size_t)(n * (count + 1)));
    nnb_plan_step *steps = calloc((size_t)count, sizeof *steps);
    for (int64_t k = 0; k < n; k++) x[k] = want[k] = (float)(rand() % 2001 - 1000) / 100.0f;
    c[0] = (float)(rand() % 9 - 4);
    for (int64_t i = 0; i < count; i++) {
        nnb_plan_step *s = &steps[i];
        const float *bound = bounds[rand() % 4];
        s->kind = rand() % (NNB_PLAN_HARD_SWISH + 1);
        s->a = i == 0 ? -1 : (i - 1) * n * 4; /* the previous step's result */
        s->a_step = 1;
        s->b = rand() % 2 ? -2 : -1; /* the constant, or x */
        s->b_step = s->b == -1;
        s->out = i == count - 1 ? -3 : i * n * 4;
        s->count = n;
        s->lo = bound[0];
        s->hi = bound[1];
        for (int64_t k = 0; k < n; k++) {
            float b = s->b == -2 ? c[0] : x[k];
            want[(i + 1) * n + k] = reference(s->kind, want[i * n + k], b, s->lo, s->hi);
        }
    }
    void *tensors[3] = {x, c, out};
    int64_t bytes[3] = {n * 4, 4, n * 4};
    const int64_t arena_bytes = n * count * 4;
    int failed = checked_run(steps, count, arena, arena_bytes, tensors, bytes, 3) != 0;
    for (int64_t k = 0; k < n && !failed; k++) failed = !same(out[k], want[count * n + k]);
    /* Reaching one float past a buffer, or a kind that does not exist: refused. */
    nnb_plan_step bad = steps[count - 1];
    bad.count = n + 1;
    failed |= nnb_plan_check(&bad, 1, arena_bytes, bytes, 3) != -EINVAL;
    bad = steps[0];
    bad.out = arena_bytes - n * 4 + 1;
    failed |= nnb_plan_check(&bad, 1, arena_bytes, bytes, 3) != -EINVAL;
    bad = steps[0];
    bad.a = -4;
    failed |= nnb_plan_check(&bad, 1, arena_bytes, bytes, 3) != -EINVAL;
    bad = steps[0];
    bad.kind = NNB_PLAN_KINDS;
    failed |= nnb_plan_check(&bad, 1, arena_bytes, bytes, 3) != -EINVAL;
    free(x), free(c), free(out), free(arena), free(want), free(steps);
    return failed;
}


/* A random strided copy (a block of a random 4-D tensor, some axes reversed)
 * checked element by element, then the same copy reaching one element past
 * its input refused. */
static int random_copy(void)
{
    int64_t dims[4], total = 1;
    for (int k = 0; k < 4; k++) dims[k] = 1 + rand() % 5, total *= dims[k];
    float *x = malloc(sizeof(float) * (size_t)total), *out = malloc(sizeof(float) * (size_t)total);
    for (int64_t k = 0; k < total; k++) x[k] = (float)k;
    nnb_plan_copy c = {.rank = 4, .elem_bytes = 4};
    int64_t stride = 1, out_stride = 1;
    for (int k = 3; k >= 0; k--) {
        const int64_t first = rand() % dims[k];
        c.extent[k] = 1 + rand() % (dims[k] - first);
        if (rand() % 4 == 0) { /* reversed: from first + extent - 1 down */
            c.a_offset += (first + c.extent[k] - 1) * stride;
            c.a_stride[k] = -stride;
        } else {
            c.a_offset += first * stride;
            c.a_stride[k] = stride;
        }
        c.out_stride[k] = out_stride;
        out_stride *= c.extent[k];
        stride *= dims[k];
    }
    nnb_plan_step step = {.kind = NNB_PLAN_COPY, .a = -1, .out = -2, .params = &c};
    void *tensors[2] = {x, out};
    int64_t bytes[2] = {total * 4, out_stride * 4};
    int failed = checked_run(&step, 1, NULL, 0, tensors, bytes, 2) != 0;
    for (int64_t i = 0; i < out_stride && !failed; i++) {
        int64_t rest = i, from = c.a_offset;
        for (int k = 3; k >= 0; k--) from += (rest % c.extent[k]) * c.a_stride[k], rest /= c.extent[k];
        failed = out[i] != x[from];
    }
    bytes[0] -= 4 * (total - (c.a_offset + 1)); /* the input ends at the first element read */
    int reaches_past = 0;
    for (int k = 0; k < 4; k++) reaches_past |= c.extent[k] > 1 && c.a_stride[k] > 0;
    if (reaches_past) failed |= nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    free(x), free(out);
    return failed;
}

/* A float convolution through the plan, padding and all, equal to the kernel
 * called directly; a window reaching past the input refused at check. */
static int random_conv(void)
{
    struct nnb_window_shape s = {.batches = 1 + rand() % 2, .in_h = 1 + rand() % 6,
                                 .in_w = 1 + rand() % 6, .in_c = 1 + rand() % 5,
                                 .filter_h = 1 + rand() % 3, .filter_w = 1 + rand() % 3,
                                 .stride_h = 1 + rand() % 2, .stride_w = 1 + rand() % 2,
                                 .dilation_h = 1, .dilation_w = 1, .out_c = 1 + rand() % 20};
    s.pad_top = s.pad_bottom = s.filter_h / 2, s.pad_left = s.pad_right = s.filter_w / 2;
    s.out_h = (s.in_h + 2 * s.pad_top - s.filter_h) / s.stride_h + 1;
    s.out_w = (s.in_w + 2 * s.pad_left - s.filter_w) / s.stride_w + 1;
    const int64_t cols = (s.out_c + 15) / 16 * 16, in_n = s.batches * s.in_h * s.in_w * s.in_c;
    const int64_t out_n = s.batches * s.out_h * s.out_w * s.out_c;
    const int64_t w_n = s.filter_h * s.filter_w * s.in_c * cols;
    float *x = malloc(sizeof(float) * (size_t)in_n), *w = calloc((size_t)w_n, sizeof(float));
    float *bias = malloc(sizeof(float) * (size_t)s.out_c), *out = malloc(sizeof(float) * (size_t)out_n);
    float *want = malloc(sizeof(float) * (size_t)out_n);
    for (int64_t k = 0; k < in_n; k++) x[k] = (float)(rand() % 200 - 100) / 50.0f;
    for (int64_t k = 0; k < w_n; k++) w[k] = (float)(rand() % 200 - 100) / 50.0f;
    for (int64_t k = 0; k < s.out_c; k++) bias[k] = (float)(rand() % 10);
    nnb_plan_conv c = {.shape = s, .weights = w, .weight_cols = cols, .bias = bias,
                       .source_c = s.in_c, .lo = -INFINITY, .hi = INFINITY};
    nnb_plan_step step = {.kind = NNB_PLAN_CONV, .a = -1, .out = -2, .params = &c};
    void *tensors[2] = {x, out};
    int64_t bytes[2] = {in_n * 4, out_n * 4};
    int failed = checked_run(&step, 1, NULL, 0, tensors, bytes, 2) != 0;
    failed |= nnb_conv_f32(x, &s, w, cols, bias, -INFINITY, INFINITY, want, NNB_CONV_BEST) != 0;
    for (int64_t k = 0; k < out_n && !failed; k++) failed = !same(out[k], want[k]);
    c.shape.out_h += 1; /* one row of windows more than the input holds */
    bytes[1] = (out_n + s.batches * s.out_w * s.out_c) * 4;
    failed |= nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    free(x), free(w), free(bias), free(out), free(want);
    return failed;
}

/* A packed float32 layer (fconv.h), plain or depthwise, as a plan step with
 * its scratch in the arena, against nnb_fconv_run / nnb_fdwconv_run called
 * directly; a packed size one float off and a scratch one byte short refused. */
static int random_fconv(void)
{
    const int depthwise = rand() % 2;
    struct nnb_fconv l = {.in_h = 1 + rand() % 9, .in_w = 1 + rand() % 9, .in_c = 1 + rand() % 20,
                          .filter_h = 1 + rand() % 3, .filter_w = 1 + rand() % 5,
                          .stride_h = 1 + rand() % 2, .stride_w = 1 + rand() % 2,
                          .dilation_h = 1, .dilation_w = 1, .lo = -INFINITY, .hi = INFINITY};
    l.out_c = depthwise ? l.in_c : 1 + rand() % 40;
    l.pad_top = l.filter_h / 2, l.pad_left = l.filter_w / 2;
    l.out_h = (l.in_h + 2 * l.pad_top - l.filter_h) / l.stride_h + 1;
    l.out_w = (l.in_w + 2 * l.pad_left - l.filter_w) / l.stride_w + 1;
    if (rand() % 3 == 0)
        l.lo = -1.0f, l.hi = 1.0f;
    const int64_t batches = 1 + rand() % 2;
    const int64_t in_n = batches * l.in_h * l.in_w * l.in_c;
    const int64_t out_n = batches * l.out_h * l.out_w * l.out_c;
    const int64_t w_n = l.filter_h * l.filter_w * (depthwise ? 1 : l.in_c) * l.out_c;
    const int64_t packed_bytes = depthwise ? nnb_fdwconv_packed_bytes(&l) : nnb_fconv_packed_bytes(&l);
    const int64_t scratch_bytes = depthwise ? nnb_fdwconv_scratch_bytes(&l) : nnb_fconv_scratch_bytes(&l);
    if (packed_bytes <= 0 || scratch_bytes < 0)
        return 1;
    float *x = malloc(sizeof(float) * (size_t)in_n), *w = malloc(sizeof(float) * (size_t)w_n);
    float *bias = malloc(sizeof(float) * (size_t)l.out_c), *out = malloc(sizeof(float) * (size_t)out_n);
    float *want = malloc(sizeof(float) * (size_t)out_n), *packed = malloc((size_t)packed_bytes);
    void *scratch = malloc((size_t)scratch_bytes + 1);
    void *arena = aligned_alloc(64, (size_t)(scratch_bytes + 64) / 64 * 64);
    for (int64_t k = 0; k < in_n; k++) x[k] = (float)(rand() % 200 - 100) / 50.0f;
    for (int64_t k = 0; k < w_n; k++) w[k] = (float)(rand() % 200 - 100) / 50.0f;
    for (int64_t k = 0; k < l.out_c; k++) bias[k] = (float)(rand() % 10);
    int failed = (depthwise ? nnb_fdwconv_pack : nnb_fconv_pack)(&l, w, bias, packed, packed_bytes) != 0;
    nnb_plan_fconv f = {.layer = &l, .packed = packed, .packed_bytes = packed_bytes,
                        .batches = batches, .scratch_bytes = scratch_bytes};
    nnb_plan_step step = {.kind = depthwise ? NNB_PLAN_FDWCONV : NNB_PLAN_FCONV, .a = -1, .out = -2,
                          .b = 0, .params = &f};
    void *tensors[2] = {x, out};
    int64_t bytes[2] = {in_n * 4, out_n * 4};
    failed |= checked_run(&step, 1, arena, scratch_bytes, tensors, bytes, 2) != 0;
    failed |= (depthwise ? nnb_fdwconv_run : nnb_fconv_run)(&l, packed, packed_bytes, x, batches, want,
                                                           scratch, scratch_bytes, NNB_FCONV_BEST) != 0;
    for (int64_t k = 0; k < out_n && !failed; k++) failed = !same(out[k], want[k]);
    f.packed_bytes = packed_bytes + 4;
    failed |= nnb_plan_check(&step, 1, scratch_bytes, bytes, 2) != -EINVAL;
    f.packed_bytes = packed_bytes, f.scratch_bytes = scratch_bytes - 1;
    failed |= scratch_bytes > 0 && nnb_plan_check(&step, 1, scratch_bytes, bytes, 2) != -EINVAL;
    f.scratch_bytes = scratch_bytes, f.batches = batches + 1; /* an image more than the buffers */
    failed |= nnb_plan_check(&step, 1, scratch_bytes, bytes, 2) != -EINVAL;
    free(x), free(w), free(bias), free(out), free(want), free(packed), free(scratch), free(arena);
    return failed;
}

/* A quantized average pool (SAME-style pads) against a direct sum here, and a
 * lookup step whose repeating input does not divide the count refused. */
static int random_average(void)
{
    struct nnb_window_shape s = {.batches = 1 + rand() % 2, .in_h = 1 + rand() % 6,
                                 .in_w = 1 + rand() % 6, .in_c = 1 + rand() % 5,
                                 .filter_h = 1 + rand() % 3, .filter_w = 1 + rand() % 3,
                                 .stride_h = 1 + rand() % 2, .stride_w = 1 + rand() % 2,
                                 .dilation_h = 1, .dilation_w = 1};
    s.out_c = s.in_c;
    s.pad_top = s.pad_bottom = s.filter_h / 2, s.pad_left = s.pad_right = s.filter_w / 2;
    s.out_h = (s.in_h + 2 * s.pad_top - s.filter_h) / s.stride_h + 1;
    s.out_w = (s.in_w + 2 * s.pad_left - s.filter_w) / s.stride_w + 1;
    const int64_t in_n = s.batches * s.in_h * s.in_w * s.in_c;
    const int64_t out_n = s.batches * s.out_h * s.out_w * s.out_c;
    int8_t *x = malloc((size_t)in_n), *out = malloc((size_t)out_n);
    for (int64_t k = 0; k < in_n; k++) x[k] = (int8_t)(rand() % 256 - 128);
    nnb_plan_average m = {.shape = s, .type = NNB_OUT_INT8, .lo = -100, .hi = 120};
    nnb_plan_step step = {.kind = NNB_PLAN_AVERAGE_Q8, .a = -1, .out = -2, .params = &m};
    void *tensors[2] = {x, out};
    int64_t bytes[2] = {in_n, out_n};
    int failed = checked_run(&step, 1, NULL, 0, tensors, bytes, 2) != 0;
    for (int64_t n = 0; n < s.batches && !failed; n++)
        for (int64_t oy = 0; oy < s.out_h; oy++)
            for (int64_t ox = 0; ox < s.out_w; ox++)
                for (int64_t c = 0; c < s.in_c; c++) {
                    int64_t sum = 0, count = 0;
                    for (int64_t i = 0; i < s.filter_h; i++)
                        for (int64_t j = 0; j < s.filter_w; j++) {
                            const int64_t y = oy * s.stride_h - s.pad_top + i;
                            const int64_t xx = ox * s.stride_w - s.pad_left + j;
                            if (y < 0 || y >= s.in_h || xx < 0 || xx >= s.in_w) continue;
                            sum += x[((n * s.in_h + y) * s.in_w + xx) * s.in_c + c], count++;
                        }
                    double mean = (double)sum / (double)count;
                    int64_t want = (int64_t)(mean >= 0 ? floor(mean + 0.5) : -floor(-mean + 0.5));
                    want = want < -100 ? -100 : want > 120 ? 120 : want;
                    failed |= out[((n * s.out_h + oy) * s.out_w + ox) * s.in_c + c] != want;
                }
    bytes[1] = out_n - 1; /* one byte short */
    failed |= nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    /* DEQUANTIZE of the input, then QUANTIZE back: the same bytes. */
    float *real = malloc(sizeof(float) * (size_t)in_n);
    int8_t *again = malloc((size_t)in_n);
    nnb_plan_quantize q = {.scale = 0.25f, .zero_point = rand() % 7 - 3, .type = NNB_OUT_INT8};
    nnb_plan_step there = {.kind = NNB_PLAN_DEQUANTIZE, .a = -1, .out = -2, .count = in_n,
                           .params = &q};
    nnb_plan_step back = {.kind = NNB_PLAN_QUANTIZE, .a = -2, .out = -3, .count = in_n,
                          .params = &q};
    nnb_plan_step both[2] = {there, back};
    void *round_trip[3] = {x, real, again};
    int64_t sizes[3] = {in_n, in_n * 4, in_n};
    failed |= checked_run(both, 2, NULL, 0, round_trip, sizes, 3) != 0;
    for (int64_t k = 0; k < in_n && !failed; k++) {
        failed = real[k] != (float)(x[k] - q.zero_point) * 0.25f || again[k] != x[k];
    }
    sizes[1] = in_n * 4 - 1;
    failed |= nnb_plan_check(both, 2, 0, sizes, 3) != -EINVAL;
    free(real), free(again);
    uint8_t table[1] = {0};
    nnb_plan_lookup lookup = {.table = table, .b_count = 3};
    nnb_plan_step bad = {.kind = NNB_PLAN_QLOOKUP, .a = -1, .b = -1, .out = -2, .count = 4,
                         .params = &lookup};
    int64_t four[2] = {4, 4};
    failed |= nnb_plan_check(&bad, 1, 0, four, 2) != -EINVAL;
    free(x), free(out);
    return failed;
}

/* A per-channel b (nnb_plan_broadcast) for every binary kind and PRELU, against
 * the formula here; a b_inner that does not divide the count refused. */
static int random_broadcast(void)
{
    const int64_t outer = 1 + rand() % 3, channels = 1 + rand() % 6, inner = 1 + rand() % 5;
    const int64_t n = outer * channels * inner;
    float *x = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    float *b = malloc(sizeof(float) * (size_t)channels);
    for (int64_t k = 0; k < n; k++) x[k] = (float)(rand() % 2001 - 1000) / 100.0f;
    for (int64_t c = 0; c < channels; c++) b[c] = (float)(rand() % 201 - 100) / 50.0f;
    const int kinds[7] = {NNB_PLAN_ADD, NNB_PLAN_SUB, NNB_PLAN_MUL, NNB_PLAN_DIV,
                          NNB_PLAN_MAXIMUM, NNB_PLAN_MINIMUM, NNB_PLAN_PRELU};
    const int kind = kinds[rand() % 7];
    nnb_plan_broadcast br = {.b_count = channels, .b_inner = inner};
    nnb_plan_step step = {.kind = kind, .a = -1, .a_step = 1, .b = -2, .out = -3, .count = n,
                          .lo = -INFINITY, .hi = INFINITY, .params = &br};
    void *tensors[3] = {x, b, out};
    int64_t bytes[3] = {n * 4, channels * 4, n * 4};
    int failed = checked_run(&step, 1, NULL, 0, tensors, bytes, 3) != 0;
    for (int64_t k = 0; k < n && !failed; k++) {
        const float y = b[(k / inner) % channels];
        const float want = kind == NNB_PLAN_PRELU ? (x[k] >= 0 ? x[k] : x[k] * y)
                                                  : reference(kind, x[k], y, -INFINITY, INFINITY);
        failed = !same(out[k], want);
    }
    br.b_inner = inner + 1;
    failed |= (n % (channels * (inner + 1)) != 0) &&
              nnb_plan_check(&step, 1, 0, bytes, 3) != -EINVAL;
    free(x), free(out), free(b);
    return failed;
}

/* One step over tensors (and an arena), checked and run as the plan is. */
static int run_one(const nnb_plan_step *step, void *arena, int64_t arena_bytes, void *const *tensors,
                   const int64_t *bytes, int64_t count)
{
    return checked_run(step, 1, arena, arena_bytes, tensors, bytes, count);
}

/* MEAN over the middle of [outer, reduce, inner] against the double sums
 * here; a count that is not outer * inner, a scratch too small, misaligned
 * or outside the arena refused. */
static int random_mean(void)
{
    const int64_t outer = 1 + rand() % 4, reduce = 1 + rand() % 50, inner = 1 + rand() % 9;
    const int64_t n = outer * reduce * inner;
    float *x = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)(outer * inner));
    double *arena = malloc(sizeof(double) * (size_t)(inner + 1));
    for (int64_t k = 0; k < n; k++) x[k] = (float)(rand() % 20001 - 10000) / 3.0f;
    nnb_plan_mean m = {.outer = outer, .reduce = reduce, .inner = inner};
    nnb_plan_step step = {.kind = NNB_PLAN_MEAN, .a = -1, .b = 0, .out = -2,
                          .count = outer * inner, .params = &m};
    void *tensors[2] = {x, out};
    int64_t bytes[2] = {n * 4, outer * inner * 4};
    int failed = run_one(&step, arena, inner * 8, tensors, bytes, 2) != 0;
    for (int64_t o = 0; o < outer && !failed; o++)
        for (int64_t i = 0; i < inner && !failed; i++) {
            double sum = 0.0;
            for (int64_t r = 0; r < reduce; r++) sum += (double)x[(o * reduce + r) * inner + i];
            failed = out[o * inner + i] != (float)(sum / (double)reduce);
        }
    const int64_t arena_bytes = (inner + 1) * 8;
    step.count = outer * inner + 1; /* not outer * inner */
    failed |= nnb_plan_check(&step, 1, arena_bytes, bytes, 2) != -EINVAL;
    step.count = outer * inner - 1; /* fewer than the step writes */
    failed |= step.count > 0 && nnb_plan_check(&step, 1, arena_bytes, bytes, 2) != -EINVAL;
    step.count = outer * inner;
    step.b = 4; /* not a double's alignment */
    failed |= nnb_plan_check(&step, 1, arena_bytes, bytes, 2) != -EINVAL;
    step.b = 16; /* its last double past the arena's end */
    failed |= nnb_plan_check(&step, 1, arena_bytes, bytes, 2) != -EINVAL;
    step.b = -1; /* a caller's tensor, not scratch */
    failed |= nnb_plan_check(&step, 1, arena_bytes, bytes, 2) != -EINVAL;
    step.b = 8;
    failed |= nnb_plan_check(&step, 1, arena_bytes, bytes, 2) != 0;
    m.inner = inner + 1; /* a reads past x */
    step.count = outer * (inner + 1);
    failed |= nnb_plan_check(&step, 1, 1 << 20, bytes, 2) != -EINVAL;
    free(x), free(out), free(arena);
    return failed;
}

/* Float SOFTMAX over rows against the double arithmetic here, a NaN row
 * NaN throughout; rows that do not divide the count and a NaN beta refused. */
static int random_softmax(void)
{
    const int64_t rows = 1 + rand() % 5, depth = 1 + rand() % 20, n = rows * depth;
    const double betas[3] = {1.0, 0.5, 2.5};
    float *x = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    for (int64_t k = 0; k < n; k++) x[k] = (float)(rand() % 2001 - 1000) / 100.0f;
    if (rand() % 4 == 0) x[rand() % n] = NAN;
    if (rand() % 4 == 0) x[rand() % n] = 900.0f; /* exp overflows but from the max */
    nnb_plan_softmax_f32 m = {.depth = depth, .beta = betas[rand() % 3]};
    nnb_plan_step step = {.kind = NNB_PLAN_SOFTMAX, .a = -1, .out = -2, .count = n, .params = &m};
    void *tensors[2] = {x, out};
    int64_t bytes[2] = {n * 4, n * 4};
    int failed = run_one(&step, NULL, 0, tensors, bytes, 2) != 0;
    for (int64_t r = 0; r < rows && !failed; r++) {
        const float *row = x + r * depth;
        double top = row[0], sum = 0.0;
        int nan = 0;
        for (int64_t k = 0; k < depth; k++) {
            nan |= isnan(row[k]);
            top = row[k] > top ? row[k] : top;
        }
        for (int64_t k = 0; k < depth; k++) sum += exp(((double)row[k] - top) * m.beta);
        for (int64_t k = 0; k < depth && !failed; k++) {
            const float want = (float)(exp(((double)row[k] - top) * m.beta) / sum);
            failed = nan ? !isnan(out[r * depth + k]) : out[r * depth + k] != want;
        }
    }
    m.depth = depth + 1;
    failed |= (n % (depth + 1) != 0) && nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    m.depth = depth;
    m.beta = NAN;
    failed |= nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    free(x), free(out);
    return failed;
}

/* SQRT and LOGISTIC against the C library here; params refused. */
static int random_unary(void)
{
    const int64_t n = 1 + rand() % 50;
    float *x = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    for (int64_t k = 0; k < n; k++) x[k] = (float)(rand() % 4001 - 2000) / 10.0f;
    x[0] = rand() % 2 ? NAN : -INFINITY;
    const int kind = rand() % 2 ? NNB_PLAN_SQRT : NNB_PLAN_LOGISTIC;
    nnb_plan_step step = {.kind = kind, .a = -1, .out = -2, .count = n};
    void *tensors[2] = {x, out};
    int64_t bytes[2] = {n * 4, n * 4};
    int failed = run_one(&step, NULL, 0, tensors, bytes, 2) != 0;
    for (int64_t k = 0; k < n && !failed; k++) {
        const float want = kind == NNB_PLAN_SQRT ? sqrtf(x[k]) : 1.0f / (1.0f + expf(-x[k]));
        failed = !same(out[k], want);
    }
    nnb_plan_mean stray = {1, 1, 1};
    step.params = &stray;
    failed |= nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    step.params = NULL;
    step.count = n + 1;
    failed |= nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    free(x), free(out);
    return failed;
}

/* RESIZE_BILINEAR against the formula here over random taps; a tap outside
 * the input and a count not the output's refused. */
static int random_resize(void)
{
    const int64_t n = 1 + rand() % 2, ih = 1 + rand() % 5, iw = 1 + rand() % 5, c = 1 + rand() % 4;
    const int64_t oh = 1 + rand() % 7, ow = 1 + rand() % 7;
    float *x = malloc(sizeof(float) * (size_t)(n * ih * iw * c));
    float *out = malloc(sizeof(float) * (size_t)(n * oh * ow * c));
    int64_t *y0 = malloc(sizeof(int64_t) * (size_t)oh), *y1 = malloc(sizeof(int64_t) * (size_t)oh);
    int64_t *x0 = malloc(sizeof(int64_t) * (size_t)ow), *x1 = malloc(sizeof(int64_t) * (size_t)ow);
    float *dy = malloc(sizeof(float) * (size_t)oh), *dx = malloc(sizeof(float) * (size_t)ow);
    for (int64_t k = 0; k < n * ih * iw * c; k++) x[k] = (float)(rand() % 2001 - 1000) / 7.0f;
    for (int64_t k = 0; k < oh; k++)
        y0[k] = rand() % ih, y1[k] = rand() % ih, dy[k] = (float)(rand() % 100) / 100.0f;
    for (int64_t k = 0; k < ow; k++)
        x0[k] = rand() % iw, x1[k] = rand() % iw, dx[k] = (float)(rand() % 100) / 100.0f;
    nnb_plan_resize r = {n, ih, iw, c, oh, ow, y0, y1, x0, x1, dy, dx};
    nnb_plan_step step = {.kind = NNB_PLAN_RESIZE_BILINEAR, .a = -1, .out = -2,
                          .count = n * oh * ow * c, .params = &r};
    void *tensors[2] = {x, out};
    int64_t bytes[2] = {n * ih * iw * c * 4, n * oh * ow * c * 4};
    int failed = run_one(&step, NULL, 0, tensors, bytes, 2) != 0;
    for (int64_t b = 0; b < n && !failed; b++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++)
                for (int64_t k = 0; k < c && !failed; k++) {
                    const float a00 = x[((b * ih + y0[i]) * iw + x0[j]) * c + k];
                    const float a10 = x[((b * ih + y1[i]) * iw + x0[j]) * c + k];
                    const float a01 = x[((b * ih + y0[i]) * iw + x1[j]) * c + k];
                    const float a11 = x[((b * ih + y1[i]) * iw + x1[j]) * c + k];
                    const float gy = 1.0f - dy[i], gx = 1.0f - dx[j];
                    const float want = a00 * gy * gx + a10 * dy[i] * gx + a01 * gy * dx[j] +
                                       a11 * dy[i] * dx[j];
                    failed = out[((b * oh + i) * ow + j) * c + k] != want;
                }
    const int64_t saved = y1[oh - 1];
    y1[oh - 1] = ih; /* one row past the input */
    failed |= nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    y1[oh - 1] = saved;
    x0[0] = -1;
    failed |= nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    x0[0] = 0;
    step.count -= 1;
    failed |= nnb_plan_check(&step, 1, 0, bytes, 2) != -EINVAL;
    free(x), free(out), free(y0), free(y1), free(x0), free(x1), free(dy), free(dx);
    return failed;
}

/* TRANSPOSE_CONV against the canvas built here (every input pixel's taps
 * added where they land, in double), within float32 rounding: random
 * strides, filters, head pads and output sizes shorter or longer than the
 * canvas (a negative tail), wide or narrow loops, NHWC or NCHW (their scratch
 * in the arena); a weight count, a count, an input or a scratch one float
 * off refused. */
static int random_transpose_conv(void)
{
    nnb_plan_transpose_conv c = {.batches = 1 + rand() % 2, .in_h = 1 + rand() % 5,
                                 .in_w = 1 + rand() % 5, .in_c = 1 + rand() % 10,
                                 .out_c = 1 + rand() % 18, .filter_h = 1 + rand() % 4,
                                 .filter_w = 1 + rand() % 4, .stride_h = 1 + rand() % 3,
                                 .stride_w = 1 + rand() % 3};
    const int64_t full_h = (c.in_h - 1) * c.stride_h + c.filter_h;
    const int64_t full_w = (c.in_w - 1) * c.stride_w + c.filter_w;
    c.pad_top = rand() % full_h, c.pad_left = rand() % full_w;
    c.out_h = 1 + rand() % (full_h - c.pad_top + 2), c.out_w = 1 + rand() % (full_w - c.pad_left + 2);
    const int64_t in_n = c.batches * c.in_h * c.in_w * c.in_c;
    const int64_t out_n = c.batches * c.out_h * c.out_w * c.out_c;
    c.weight_count = c.in_c * c.filter_h * c.filter_w * c.out_c;
    c.narrow = rand() % 2, c.nchw = rand() % 2;
    const int64_t scratch = nnb_plan_transpose_conv_scratch(&c);
    float *arena = scratch ? malloc((size_t)scratch) : NULL;
    float *x = malloc(sizeof(float) * (size_t)in_n), *out = malloc(sizeof(float) * (size_t)out_n);
    float *w = malloc(sizeof(float) * (size_t)c.weight_count);
    float *bias = malloc(sizeof(float) * (size_t)c.out_c);
    double *want = calloc((size_t)out_n, sizeof(double));
    for (int64_t k = 0; k < in_n; k++) x[k] = (float)(rand() % 200 - 100) / 50.0f;
    for (int64_t k = 0; k < c.weight_count; k++) w[k] = (float)(rand() % 200 - 100) / 50.0f;
    for (int64_t k = 0; k < c.out_c; k++) bias[k] = (float)(rand() % 10 - 5);
    c.weights = w, c.bias = bias;
    const float lo = rand() % 2 ? 0.0f : -INFINITY, hi = rand() % 2 ? 6.0f : INFINITY;
    for (int64_t n = 0; n < c.batches; n++)
        for (int64_t y = 0; y < c.in_h; y++)
            for (int64_t xx = 0; xx < c.in_w; xx++)
                for (int64_t i = 0; i < c.filter_h; i++)
                    for (int64_t j = 0; j < c.filter_w; j++) {
                        const int64_t oy = y * c.stride_h + i - c.pad_top;
                        const int64_t ox = xx * c.stride_w + j - c.pad_left;
                        if (oy < 0 || oy >= c.out_h || ox < 0 || ox >= c.out_w)
                            continue;
                        for (int64_t k = 0; k < c.in_c; k++)
                            for (int64_t e = 0; e < c.out_c; e++) {
                                const int64_t at = c.nchw
                                                       ? ((n * c.in_c + k) * c.in_h + y) * c.in_w + xx
                                                       : ((n * c.in_h + y) * c.in_w + xx) * c.in_c + k;
                                const int64_t tap =
                                    ((k * c.filter_h + i) * c.filter_w + j) * c.out_c + e;
                                want[((n * c.out_h + oy) * c.out_w + ox) * c.out_c + e] +=
                                    (double)x[at] * w[tap];
                            }
                    }
    nnb_plan_step step = {.kind = NNB_PLAN_TRANSPOSE_CONV, .a = -1, .out = -2, .count = out_n,
                          .lo = lo, .hi = hi, .params = &c};
    void *tensors[2] = {x, out};
    int64_t bytes[2] = {in_n * 4, out_n * 4};
    int failed = run_one(&step, arena, scratch, tensors, bytes, 2) != 0;
    for (int64_t k = 0; k < out_n && !failed; k++) { /* k: NHWC; the output's own place */
        const int64_t e = k % c.out_c, pixel = k / c.out_c, pixels = c.out_h * c.out_w;
        const int64_t at = c.nchw ? ((pixel / pixels) * c.out_c + e) * pixels + pixel % pixels : k;
        double v = want[k] + bias[e];
        v = v < lo ? lo : v > hi ? hi : v;
        failed = fabs(out[at] - v) > 1e-4 * (1.0 + fabs(v));
    }
    if (scratch) {
        failed |= nnb_plan_check(&step, 1, scratch - 4, bytes, 2) != -EINVAL;
        step.b = 2;
        failed |= nnb_plan_check(&step, 1, scratch + 4, bytes, 2) != -EINVAL; /* misaligned */
        step.b = 0;
    }
    c.weight_count += 1;
    failed |= nnb_plan_check(&step, 1, scratch, bytes, 2) != -EINVAL;
    c.weight_count -= 1;
    step.count += 1;
    failed |= nnb_plan_check(&step, 1, scratch, bytes, 2) != -EINVAL;
    step.count -= 1;
    bytes[0] -= 4;
    failed |= nnb_plan_check(&step, 1, scratch, bytes, 2) != -EINVAL;
    bytes[0] += 4;
    c.pad_left = -1;
    failed |= nnb_plan_check(&step, 1, scratch, bytes, 2) != -EINVAL;
    free(x), free(out), free(w), free(bias), free(want), free(arena);
    return failed;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 500, failures = 0;
    srand(7);
    for (int r = 0; r < runs; r++) failures += random_chain();
    for (int r = 0; r < runs; r++) failures += random_copy();
    for (int r = 0; r < runs / 4; r++) failures += random_conv();
    for (int r = 0; r < runs / 4; r++) failures += random_average();
    for (int r = 0; r < runs / 4; r++) failures += random_fconv();
    for (int r = 0; r < runs; r++) failures += random_broadcast();
    for (int r = 0; r < runs; r++) failures += random_mean();
    for (int r = 0; r < runs; r++) failures += random_softmax();
    for (int r = 0; r < runs; r++) failures += random_unary();
    for (int r = 0; r < runs; r++) failures += random_resize();
    for (int r = 0; r < runs; r++) failures += random_transpose_conv();
    printf("plan: %d random chains, copies, per-channel steps, means, softmaxes, square roots, logistics, resizes and transposed convolutions, %d convolutions, packed float layers and 8-bit average pools, %d failed\n", runs, runs / 4,
           failures);
    return failures != 0;
}
