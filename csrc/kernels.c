/* Compute kernels numpy has no fast form for.
 *
 * Convolution: numpy's route is an im2col copy and then OpenBLAS, whose
 * copy costs as much as the product on the small layers of a mobile CNN.
 * The loop here reads the input in place, never builds the im2col matrix,
 * pads implicitly, and keeps a block of pixels x 16-channel tiles of sums
 * in vector registers across every filter tap: each weight vector loaded
 * feeds every pixel of the block, each input value broadcast feeds every
 * tile (a 3x3 layer, 32x32x16 to 32 channels: 64 us against 117 us for
 * im2col and matmul).  A 1x1 layer with few pixels or many channels is a
 * plain matrix product, left to BLAS (conv.py's _blas_wins).
 *
 * Depthwise convolution: every output channel reads only its own input
 * channel, so it is no matrix product and BLAS cannot help; numpy's einsum
 * over a window view ran face_detection_short_range's depthwise layers 5-8x
 * slower than a C loop.
 *
 * Pooling: numpy's separable reductions over strided window views cost a
 * pass per tap and an array per pass; this loop reads each window once.
 *
 * Channels are the innermost, contiguous axis (NHWC), so every loop works
 * on vectors of channels.  The loops are written once (window_loops.h) and
 * built per machine with its native vector width.
 *
 * The caller owns policy (padding values, depth multiplier, activation,
 * quantization); this file owns the arithmetic only, and checks that every
 * index it will touch lies inside the arrays it was given. */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nnburst.h"

#define TILE 16 /* channels per tile: the weights' layout */
#define MAX_PIXELS 16
#define MAX_TILES 2

/* Half a tile, for compares: the widest vector whose compares GCC 12 keeps
 * in vector registers under both the AVX2 and the AVX-512 target (16-float
 * compares under target("avx2") fall apart into scalar ones). */
#define HALF (TILE / 2)
typedef float half_t __attribute__((vector_size(HALF * sizeof(float))));
typedef int32_t half_mask_t __attribute__((vector_size(HALF * sizeof(int32_t))));

/* x86-64 with GCC and glibc (whose loader resolves the choice, an ifunc):
 * one build for every machine, the AVX2 clone picked where the CPU has it. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
#define MACHINE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MACHINE_CLONES
#endif
/* With an AVX-512 clone too (x86-64-v4, GCC 11 on): 64-bit integer lanes,
 * as requantize's products need. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) && \
    __GNUC__ >= 11
#define WIDE_MACHINE_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define WIDE_MACHINE_CLONES MACHINE_CLONES
#endif

/* Whether the last input row (column) a window reads exists:
 * (out-1)*stride + (filter-1)*dilation <= in-1, every factor positive,
 * computed without overflow whatever the caller passed. */
static int window_fits(int64_t in, int64_t out, int64_t filter, int64_t stride, int64_t dilation) {
    if (in < 1 || out < 1 || filter < 1 || stride < 1 || dilation < 1) return 0;
    int64_t room = in - 1;
    if (out - 1 > room / stride) return 0;
    room -= (out - 1) * stride;
    return filter - 1 <= room / dilation;
}

/* The same over the input with pad_before and pad_after rows (columns) of
 * zeros around it; each pad at most 2^30, so that no sum overflows. */
static int padded_window_fits(int64_t in, int64_t pad_before, int64_t pad_after, int64_t out,
                              int64_t filter, int64_t stride, int64_t dilation) {
    const int64_t limit = (int64_t)1 << 30;
    if (in < 1 || pad_before < 0 || pad_after < 0 || pad_before > limit || pad_after > limit)
        return 0;
    return window_fits(in + pad_before + pad_after, out, filter, stride, dilation);
}


/* The convolution loops, once per machine (window_loops.h says how).  The
 * block sizes fit each machine's registers: AVX-512 has 32 vector
 * registers of 16 floats (8 pixels x 2 tiles of sums, 2 weight tiles and a
 * broadcast); AVX2 16 of 8 floats (4 x 1 tiles: 8 of them); SSE and NEON
 * 16 of 4 floats (2 x 1 tiles: 8 of them). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
#define CONV_DISPATCH 1

typedef float vec16_t __attribute__((vector_size(16 * sizeof(float))));
typedef int32_t mask16_t __attribute__((vector_size(16 * sizeof(int32_t))));
#define VEC vec16_t
#define VEC_MASK mask16_t
#define LANES 16
#define TARGET __attribute__((target("avx512f")))
#define NAME(name) name##_avx512
#define CONV_PIXELS 8
#define CONV_TILES 2
#define DEPTHWISE_PIXELS 8
#include "window_loops.h"

#define VEC half_t
#define VEC_MASK half_mask_t
#define LANES 8
#define TARGET __attribute__((target("avx2,fma")))
#define NAME(name) name##_avx2
#define CONV_PIXELS 4
#define CONV_TILES 1
#define DEPTHWISE_PIXELS 4
#include "window_loops.h"
#endif

typedef float vec4_t __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t mask4_t __attribute__((vector_size(4 * sizeof(int32_t))));
#define VEC vec4_t
#define VEC_MASK mask4_t
#define LANES 4
#define TARGET
#define NAME(name) name##_portable
#define CONV_PIXELS 2
#define CONV_TILES 1
#define DEPTHWISE_PIXELS 2
#include "window_loops.h"

/* The loop path names (NNB_CONV_*): NNB_CONV_BEST resolved to the fastest
 * this build and CPU run; -ENOTSUP for one they do not. */
static int machine_path(int path) {
#ifdef CONV_DISPATCH
    const int avx512 = __builtin_cpu_supports("avx512f");
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    const int avx512 = 0, avx2 = 0;
#endif
    if (path == NNB_CONV_BEST)
        return avx512 ? NNB_CONV_AVX512 : avx2 ? NNB_CONV_AVX2 : NNB_CONV_PORTABLE;
    if (path == NNB_CONV_PORTABLE || (path == NNB_CONV_AVX2 && avx2) ||
        (path == NNB_CONV_AVX512 && avx512))
        return path;
    return -ENOTSUP;
}

/* s asks for no padding: its input has it already. */
static int unpadded(const struct nnb_window_shape *s) {
    return !(s->pad_top || s->pad_bottom || s->pad_left || s->pad_right);
}

/* Both axes of s fit its padded input (padded_window_fits). */
static int windows_fit(const struct nnb_window_shape *s) {
    return padded_window_fits(s->in_h, s->pad_top, s->pad_bottom, s->out_h, s->filter_h,
                              s->stride_h, s->dilation_h) &&
           padded_window_fits(s->in_w, s->pad_left, s->pad_right, s->out_w, s->filter_w,
                              s->stride_w, s->dilation_w);
}

int nnb_conv_f32(const float *in, const struct nnb_window_shape *shape, const float *weights,
                 int64_t weight_cols, const float *bias, float lo, float hi, float *out,
                 int path) {
    if (in == NULL || shape == NULL || weights == NULL || bias == NULL || out == NULL)
        return -EINVAL;
    const struct nnb_window_shape s = *shape; /* read once: the caller cannot change it midway */
    if (s.batches < 1 || s.in_c < 1 || s.out_c < 1 || weight_cols < s.out_c ||
        weight_cols % TILE != 0)
        return -EINVAL;
    if (!windows_fit(&s)) return -EINVAL;
    path = machine_path(path);
    if (path < 0) return path;
    float *zero_row = NULL; /* what a pixel of the padding reads */
    if (!unpadded(&s)) {
        zero_row = calloc((size_t)s.in_c, sizeof(float));
        if (zero_row == NULL) return -ENOMEM;
    }
    const float *zeros = zero_row != NULL ? zero_row : in; /* never read without padding */
#ifdef CONV_DISPATCH
    if (path == NNB_CONV_AVX512)
        conv_avx512(in, &s, weights, weight_cols, bias, lo, hi, out, zeros);
    else if (path == NNB_CONV_AVX2)
        conv_avx2(in, &s, weights, weight_cols, bias, lo, hi, out, zeros);
    else
#endif
        conv_portable(in, &s, weights, weight_cols, bias, lo, hi, out, zeros);
    free(zero_row);
    return 0;
}

int nnb_depthwise_conv_f32(const float *in, const struct nnb_window_shape *shape,
                           const float *weights, int64_t weight_c, const float *bias, float lo,
                           float hi, float *out, int path) {
    if (in == NULL || shape == NULL || weights == NULL || bias == NULL || out == NULL)
        return -EINVAL;
    const struct nnb_window_shape s = *shape;
    if (s.batches < 1 || s.out_c < 1 || s.in_c < TILE || s.in_c < s.out_c ||
        weight_c < s.out_c || weight_c % TILE != 0 || !windows_fit(&s))
        return -EINVAL;
    path = machine_path(path);
    if (path < 0) return path;
    /* The output columns whose windows read no padding column: x * stride_w
     * - pad_left >= 0, and that plus (filter_w - 1) * dilation_w < in_w.
     * windows_fit showed reach < in_w + pads, each pad at most 2^30, so
     * nothing here overflows. */
    const int64_t reach = (s.filter_w - 1) * s.dilation_w;
    const int64_t inner_lo = s.pad_left / s.stride_w + (s.pad_left % s.stride_w != 0);
    const int64_t last = s.in_w - 1 - reach + s.pad_left; /* the last inner x times stride_w */
    int64_t inner_hi = last < 0 ? -1 : last / s.stride_w;
    if (inner_hi > s.out_w - 1) inner_hi = s.out_w - 1;
#ifdef CONV_DISPATCH
    if (path == NNB_CONV_AVX512)
        depthwise_avx512(in, &s, weights, weight_c, bias, lo, hi, out, inner_lo, inner_hi);
    else if (path == NNB_CONV_AVX2)
        depthwise_avx2(in, &s, weights, weight_c, bias, lo, hi, out, inner_lo, inner_hi);
    else
#endif
        depthwise_portable(in, &s, weights, weight_c, bias, lo, hi, out, inner_lo, inner_hi);
    return 0;
}

/* Max or sum over each window.  np.maximum's NaN rule: a NaN anywhere in
 * the window makes the result NaN.  Max keeps two values per lane, the
 * largest so far and the last NaN seen: each is one compare and a select,
 * which vectorise where a combined "larger or NaN" mask did not. */
static inline __attribute__((always_inline)) void pool_all(const float *restrict in,
                                                           const struct nnb_window_shape *s,
                                                           float *restrict out, const int KIND) {
    const int64_t c_count = s->in_c, row_step = s->dilation_h * s->in_w * c_count,
                  tap_step = s->dilation_w * c_count;
    for (int64_t b = 0; b < s->batches; b++)
        for (int64_t y = 0; y < s->out_h; y++)
            for (int64_t x = 0; x < s->out_w; x++) {
                float *restrict o = out + ((b * s->out_h + y) * s->out_w + x) * c_count;
                const float *corner =
                    in + ((b * s->in_h + y * s->stride_h) * s->in_w + x * s->stride_w) * c_count;
                int64_t c0 = 0;
                /* The last block of a channel count that is no multiple of 8
                 * ends at the last channel and overlaps the one before it
                 * (recomputing a few to the same values): no scalar tail. */
                for (; c_count >= HALF && c0 < c_count; c0 += HALF) {
                    if (c0 + HALF > c_count) c0 = c_count - HALF;
                    half_t acc, nan = {0};
                    memcpy(&acc, corner + c0, sizeof acc);
                    for (int64_t i = 0; i < s->filter_h; i++)
                        for (int64_t j = i == 0; j < s->filter_w; j++) {
                            half_t value;
                            memcpy(&value, corner + i * row_step + j * tap_step + c0, sizeof value);
                            if (KIND == NNB_POOL_SUM) {
                                acc += value;
                                continue;
                            }
                            const half_mask_t larger = value > acc, is_nan = value != value;
                            acc = (half_t)(((half_mask_t)value & larger) |
                                               ((half_mask_t)acc & ~larger));
                            nan = (half_t)(((half_mask_t)value & is_nan) |
                                               ((half_mask_t)nan & ~is_nan));
                        }
                    if (KIND == NNB_POOL_MAX) { /* the first value may be the NaN */
                        const half_mask_t first_nan = acc != acc, seen_nan = nan != nan;
                        acc = (half_t)(((half_mask_t)nan & seen_nan & ~first_nan) |
                                           ((half_mask_t)acc & ~(seen_nan & ~first_nan)));
                    }
                    memcpy(o + c0, &acc, sizeof acc);
                }
                for (int64_t c = c0; c < c_count; c++) {
                    float acc = corner[c];
                    for (int64_t i = 0; i < s->filter_h; i++)
                        for (int64_t j = i == 0; j < s->filter_w; j++) {
                            const float value = corner[i * row_step + j * tap_step + c];
                            if (KIND == NNB_POOL_SUM)
                                acc += value;
                            else if (value > acc || value != value || acc != acc)
                                acc = acc != acc ? acc : value;
                        }
                    o[c] = acc;
                }
            }
}

MACHINE_CLONES
static void pool(const float *in, const struct nnb_window_shape *s, int kind, float *out) {
    if (kind == NNB_POOL_SUM)
        pool_all(in, s, out, NNB_POOL_SUM);
    else
        pool_all(in, s, out, NNB_POOL_MAX);
}

int nnb_pool_f32(const float *in, const struct nnb_window_shape *shape, int kind, float *out) {
    if (in == NULL || shape == NULL || out == NULL) return -EINVAL;
    const struct nnb_window_shape s = *shape;
    if (s.batches < 1 || s.in_c < 1 || s.out_c != s.in_c || !unpadded(&s) ||
        !windows_fit(&s) || (kind != NNB_POOL_MAX && kind != NNB_POOL_SUM))
        return -EINVAL;
    pool(in, &s, kind, out);
    return 0;
}

/* A comparison, not fmaxf/fminf: a NaN sum fails both tests and is kept. */
static inline float clamp_keep_nan(float v, float lo, float hi) {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

MACHINE_CLONES
static void add_padded_channels(const float *a, const float *x, uint64_t pixels, uint32_t channels,
                                uint32_t x_channels, float lo, float hi, float *out) {
    for (uint64_t p = 0; p < pixels; p++) {
        const float *ap = a + p * channels, *xp = x + p * x_channels;
        float *op = out + p * channels;
        for (uint32_t c = 0; c < x_channels; c++) op[c] = clamp_keep_nan(ap[c] + xp[c], lo, hi);
        for (uint32_t c = x_channels; c < channels; c++) op[c] = clamp_keep_nan(ap[c], lo, hi);
    }
}

int nnb_add_padded_channels_f32(const float *a, const float *x, uint64_t pixels,
                                uint32_t channels, uint32_t x_channels, float lo, float hi,
                                float *out) {
    if (a == NULL || x == NULL || out == NULL || x_channels > channels) return -EINVAL;
    add_padded_channels(a, x, pixels, channels, x_channels, lo, hi, out);
    return 0;
}

/* nnb_requantize_f32 (nnburst.h): every step gives what the int32
 * reference computes, without a branch and with the same steps for every
 * channel (their parameters in arrays), so that the compiler runs a vector
 * of channels at a time. */
static inline int64_t saturate_int32(int64_t v) {
    return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v;
}

/* The channels' fixed-point parameters as arrays (a vector shift of 64-bit
 * lanes by 32-bit counts has no instruction, so the left shift is a factor
 * and the right shift's mask is ready), repeated for `span` elements: rows
 * of few channels are requantized several at a time, so that the loop is
 * long enough for AVX-512's 64 lanes of int8 results. */
struct requant_params {
    int64_t *bias;
    int64_t *scale;  /* 2^max(shift, 0) */
    int32_t *multiplier;
    int32_t *right;  /* max(-shift, 0) */
    int32_t *mask;   /* 2^right - 1 */
    int64_t span;    /* a multiple of the channels */
};

#define REQUANTIZE_SPAN 64

/* acc: an exact integer sum, below 2^24 in magnitude (float32 holds it);
 * bias any int64. */
static inline int32_t requantized(float acc, int64_t bias, int32_t multiplier, int64_t scale,
                                  int32_t right, int32_t mask, int32_t zero_point, int32_t lo,
                                  int32_t hi) {
    const int64_t total = (int64_t)acc + bias;
    /* total * 2^left saturated to int32: a total outside int32 saturates as
     * it is; one inside, times at most 2^30, fits int64. */
    const int64_t inside = saturate_int32(total);
    const int32_t x = (int32_t)(inside == total ? saturate_int32(inside * scale) : inside);
    /* gemmlowp's SaturatingRoundingDoublingHighMul: (x * m + nudge) / 2^31,
     * the division truncating toward zero (a negative sum rounded up by
     * adding 2^31 - 1 before the arithmetic shift); it fits int32. */
    const int64_t ab = (int64_t)x * multiplier;
    const int64_t nudged = ab + (ab >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30));
    int32_t high = (int32_t)((nudged + (nudged < 0 ? ((int64_t)1 << 31) - 1 : 0)) >> 31);
    high = x == INT32_MIN && multiplier == INT32_MIN ? INT32_MAX : high;
    /* RoundingDivideByPOT: an arithmetic shift rounding half away from zero. */
    const int32_t threshold = (mask >> 1) + (high < 0);
    const int32_t v = (high >> right) + ((high & mask) > threshold);
    const int64_t shifted = (int64_t)v + zero_point;
    return (int32_t)(shifted < lo ? lo : shifted > hi ? hi : shifted);
}

/* n elements from acc into uint8 or int8 (a loop per type, so that the
 * store's type is no branch inside it). */
#define REQUANTIZE(type)                                                                   \
    for (int64_t i = 0; i < n; i++)                                                       \
        ((type *)out)[i] = (type)requantized(acc[i], k->bias[i], k->multiplier[i],         \
                                             k->scale[i], k->right[i], k->mask[i],        \
                                             zero_point, lo, hi);

WIDE_MACHINE_CLONES
static void requantize_run(const float *restrict acc, int64_t n, const struct requant_params *k,
                           int32_t zero_point, int32_t lo, int32_t hi, int out_type,
                           void *restrict out) {
    if (out_type == NNB_OUT_UINT8) {
        REQUANTIZE(uint8_t)
    } else {
        REQUANTIZE(int8_t)
    }
}
#undef REQUANTIZE

int nnb_requantize_f32(const float *acc, uint64_t rows, uint32_t channels, const int64_t *bias,
                       const int64_t *multipliers, const int64_t *shifts, int per_channel,
                       int32_t zero_point, int32_t lo, int32_t hi, int out_type, void *out) {
    if (acc == NULL || bias == NULL || multipliers == NULL || shifts == NULL || out == NULL)
        return -EINVAL;
    const int32_t type_lo = out_type == NNB_OUT_UINT8 ? 0 : -128;
    const int32_t type_hi = out_type == NNB_OUT_UINT8 ? 255 : 127;
    if ((out_type != NNB_OUT_UINT8 && out_type != NNB_OUT_INT8) || lo < type_lo || hi > type_hi ||
        lo > hi || channels == 0 || rows > (uint64_t)INT64_MAX / channels)
        return -EINVAL;
    const uint32_t kinds = per_channel ? channels : 1;
    for (uint32_t c = 0; c < kinds; c++)
        if (shifts[c] < -31 || shifts[c] > 30 || multipliers[c] < INT32_MIN ||
            multipliers[c] > INT32_MAX)
            return -EINVAL;
    /* Rows taken `group` at a time: the parameters repeated over them. */
    const uint64_t group =
        channels >= REQUANTIZE_SPAN ? 1 : (REQUANTIZE_SPAN + channels - 1) / channels;
    struct requant_params k = {.span = (int64_t)(group * channels)};
    void *block = malloc((2 * sizeof(int64_t) + 3 * sizeof(int32_t)) * (size_t)k.span);
    if (block == NULL) return -ENOMEM;
    k.bias = block;
    k.scale = k.bias + k.span;
    k.multiplier = (int32_t *)(k.scale + k.span);
    k.right = k.multiplier + k.span;
    k.mask = k.right + k.span;
    for (int64_t i = 0; i < k.span; i++) {
        const uint32_t c = (uint32_t)(i % channels), j = per_channel ? c : 0;
        k.bias[i] = bias[c];
        k.multiplier[i] = (int32_t)multipliers[j];
        k.scale[i] = (int64_t)1 << (shifts[j] > 0 ? shifts[j] : 0);
        k.right[i] = shifts[j] < 0 ? (int32_t)-shifts[j] : 0;
        k.mask[i] = (int32_t)(((int64_t)1 << k.right[i]) - 1);
    }
    const uint64_t whole = rows / group * group;
    uint8_t *bytes = out; /* uint8 or int8: one byte an element */
    for (uint64_t p = 0; p < whole; p += group)
        requantize_run(acc + p * channels, k.span, &k, zero_point, lo, hi, out_type,
                       bytes + p * channels);
    if (whole < rows) /* the last rows: the parameters' first repeats */
        requantize_run(acc + whole * channels, (int64_t)((rows - whole) * channels), &k,
                       zero_point, lo, hi, out_type, bytes + whole * channels);
    free(block);
    return 0;
}
