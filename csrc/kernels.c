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

#include "kernels.h"

#define TILE 16 /* channels per tile: the weights' layout */
#define MAX_PIXELS 16
#define MAX_TILES 2

/* Half a tile, for compares: the widest vector whose compares GCC 12 keeps
 * in vector registers under both the AVX2 and the AVX-512 target (16-float
 * compares under target("avx2") fall apart into scalar ones). */
#define HALF (TILE / 2)
typedef float half_t __attribute__((vector_size(HALF * sizeof(float))));
typedef int32_t half_mask_t __attribute__((vector_size(HALF * sizeof(int32_t))));
typedef uint8_t lane_bytes_t __attribute__((vector_size(HALF * sizeof(int32_t))));

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

/* The range of an 8-bit type (NNB_OUT_*); 0 for an unknown type. */
static int type_range(int type, int32_t *lo, int32_t *hi) {
    if (type == NNB_OUT_UINT8) {
        *lo = 0, *hi = 255;
        return 1;
    }
    if (type == NNB_OUT_INT8) {
        *lo = -128, *hi = 127;
        return 1;
    }
    return 0;
}

/* nnb_requantize_f32 (kernels.h): every step gives what the int32
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
 * bias any int64.  The steps of multiply_by_quantized_multiplier (below),
 * written without a branch on the data so that GCC vectorises the loop. */
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

/* gemmlowp's SaturatingRoundingDoublingHighMul on int32 values held in int64:
 * (a * b + nudge) / 2^31, the division truncating toward zero. */
static inline int64_t doubling_high_mul(int64_t a, int64_t b) {
    if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
    const int64_t ab = a * b;
    const int64_t nudged = ab + (ab >= 0 ? (1LL << 30) : 1 - (1LL << 30));
    return nudged >= 0 ? nudged >> 31 : -((-nudged) >> 31);
}

/* RoundingDivideByPOT: an arithmetic right shift rounding half away from zero. */
static inline int64_t rounding_divide_by_pot(int64_t v, int64_t exponent) {
    const int64_t mask = (1LL << exponent) - 1;
    const int64_t threshold = (mask >> 1) + (v < 0);
    return (v >> exponent) + ((v & mask) > threshold);
}

/* MultiplyByQuantizedMultiplier (common.multiply_by_quantized_multiplier):
 * total * 2^max(shift, 0) saturated to int32, the high product with the
 * multiplier, then a rounding right shift by max(-shift, 0).  total any
 * int64, multiplier within int32, shift in [-31, 30]. */
static inline int64_t multiply_by_quantized_multiplier(int64_t total, int64_t multiplier,
                                                       int64_t shift) {
    /* A total outside int32 saturates as it is; one inside times at most
     * 2^30 fits int64. */
    int64_t x = saturate_int32(total);
    if (x == total && shift > 0) x = saturate_int32(total * (1LL << shift));
    return rounding_divide_by_pot(doubling_high_mul(x, multiplier), shift < 0 ? -shift : 0);
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
    int32_t type_lo, type_hi;
    if (!type_range(out_type, &type_lo, &type_hi) || lo < type_lo || hi > type_hi || lo > hi ||
        channels == 0 || rows > (uint64_t)INT64_MAX / channels)
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

static inline __attribute__((always_inline)) int32_t load8(const void *p, uint64_t i,
                                                           const int TYPE) {
    return TYPE == NNB_OUT_UINT8 ? ((const uint8_t *)p)[i] : ((const int8_t *)p)[i];
}

static inline __attribute__((always_inline)) void store8(void *p, uint64_t i, int32_t v,
                                                         const int TYPE) {
    if (TYPE == NNB_OUT_UINT8)
        ((uint8_t *)p)[i] = (uint8_t)v;
    else
        ((int8_t *)p)[i] = (int8_t)v;
}

static int shift_ok(int32_t shift) { return shift >= -31 && shift <= 30; }

int nnb_quant_binary_table(const struct nnb_quant_binary *params, uint8_t *table) {
    if (params == NULL || table == NULL) return -EINVAL;
    const struct nnb_quant_binary p = *params; /* read once */
    int32_t type_lo, type_hi;
    if (!type_range(p.type, &type_lo, &type_hi)) return -EINVAL;
    /* Zero points inside the type keep every difference within 9 bits, so
     * that the left shift of at most 24 stays far inside int64. */
    if (p.zero_point_a < type_lo || p.zero_point_a > type_hi || p.zero_point_b < type_lo ||
        p.zero_point_b > type_hi || p.lo < type_lo || p.hi > type_hi || p.lo > p.hi ||
        !shift_ok(p.shift))
        return -EINVAL;
    if (p.kind == NNB_QUANT_ADD) {
        if (p.left_shift < 0 || p.left_shift > 24 || !shift_ok(p.shift_a) || !shift_ok(p.shift_b))
            return -EINVAL;
    } else if (p.kind != NNB_QUANT_MUL) {
        return -EINVAL;
    }
    /* What each input byte contributes (as the type reads it): for ADD its
     * rescaled value, for MUL its difference from the zero point. */
    int64_t part_a[256], part_b[256];
    for (int32_t i = 0; i < 256; i++) {
        const int32_t byte = p.type == NNB_OUT_UINT8 ? i : (int8_t)(uint8_t)i;
        part_a[i] = byte - p.zero_point_a;
        part_b[i] = byte - p.zero_point_b;
        if (p.kind == NNB_QUANT_ADD) {
            part_a[i] = multiply_by_quantized_multiplier(part_a[i] * (1LL << p.left_shift),
                                                         p.multiplier_a, p.shift_a);
            part_b[i] = multiply_by_quantized_multiplier(part_b[i] * (1LL << p.left_shift),
                                                         p.multiplier_b, p.shift_b);
        }
    }
    for (int32_t i = 0; i < 256; i++)
        for (int32_t j = 0; j < 256; j++) {
            const int64_t v = p.kind == NNB_QUANT_ADD ? part_a[i] + part_b[j] : part_a[i] * part_b[j];
            int64_t q = multiply_by_quantized_multiplier(v, p.multiplier, p.shift) + p.zero_point_out;
            q = q < p.lo ? p.lo : q > p.hi ? p.hi : q;
            table[i * 256 + j] = (uint8_t)((uint64_t)q & 0xFF); /* int8: its two's complement byte */
        }
    return 0;
}

int nnb_quant_binary_lookup(const uint8_t *a, uint64_t count, const uint8_t *b, uint64_t b_count,
                            const uint8_t *table, uint8_t *out) {
    if (a == NULL || b == NULL || table == NULL || out == NULL || b_count == 0 ||
        count % b_count != 0)
        return -EINVAL;
    for (uint64_t row = 0; row < count; row += b_count) {
        const uint8_t *ar = a + row;
        uint8_t *o = out + row;
        for (uint64_t j = 0; j < b_count; j++) o[j] = table[(uint32_t)ar[j] << 8 | b[j]];
    }
    return 0;
}

/* The fixed-point helpers of the softmax's reciprocal, each the int64
 * computation of its namesake in cpu/ops/fixed_point.py. */
static inline int64_t wrap_int32(int64_t v) {
    return (int64_t)(((uint64_t)v + (1ULL << 31)) & 0xFFFFFFFFULL) - (1LL << 31);
}

/* gemmlowp's SaturatingRoundingMultiplyByPOT for exponent in [1, 30]. */
static inline int64_t saturating_multiply_by_pot(int64_t x, int exponent) {
    const int64_t threshold = (1LL << (31 - exponent)) - 1;
    if (x > threshold) return INT32_MAX;
    if (x < -threshold) return INT32_MIN;
    return x * (1LL << exponent);
}

/* gemmlowp's one_over_one_plus_x_for_x_in_0_1: a in [-2^31, 2^31), Q0.31.
 * Every product stays below 2^63: half_denominator and x are within 2^31,
 * one_minus within 2^31 + 2^29. */
static int64_t one_over_one_plus_x(int64_t a) {
    const int64_t total = a + INT32_MAX;
    const int64_t half_denominator = (total + (total >= 0 ? 1 : -1)) / 2; /* RoundingHalfSum */
    int64_t x = 1515870810 + doubling_high_mul(half_denominator, -1010580540);
    for (int i = 0; i < 3; i++) { /* Newton-Raphson on 1/(1+a) in Q2.29 */
        const int64_t one_minus = (1LL << 29) - doubling_high_mul(half_denominator, x);
        x = wrap_int32(x + saturating_multiply_by_pot(doubling_high_mul(x, one_minus), 2));
    }
    return saturating_multiply_by_pot(x, 1);
}

static inline __attribute__((always_inline)) void softmax_rows(
    const void *in, uint64_t rows, uint32_t depth, const int32_t *exps, int64_t radius,
    void *out, const int TYPE) {
    const int32_t type_lo = TYPE == NNB_OUT_UINT8 ? 0 : -128;
    const int32_t type_hi = TYPE == NNB_OUT_UINT8 ? 255 : 127;
    for (uint64_t r = 0; r < rows; r++) {
        const uint64_t first = r * depth;
        int32_t max = type_lo;
        for (uint32_t j = 0; j < depth; j++) {
            const int32_t v = load8(in, first + j, TYPE);
            max = v > max ? v : max;
        }
        int64_t sum = 0; /* of Q12.19 exps */
        for (uint32_t j = 0; j < depth; j++) {
            const int32_t k = max - load8(in, first + j, TYPE);
            if (k <= radius) sum += rounding_divide_by_pot(exps[k], 12);
        }
        sum = wrap_int32(sum);
        /* The bit length of |sum| (frexp's exponent): the sum shifted left
         * into [2^31, 2^32), less one, is the reciprocal's x in Q0.31. */
        const uint64_t magnitude = sum < 0 ? (uint64_t)-sum : (uint64_t)sum;
        const int headroom_plus_one = magnitude ? __builtin_clzll(magnitude) - 32 : 32;
        const int64_t shifted_minus_one =
            (int64_t)(((uint64_t)sum << headroom_plus_one) & 0xFFFFFFFFULL) - (1LL << 31);
        const int64_t scale = one_over_one_plus_x(shifted_minus_one);
        const int exponent = 12 - headroom_plus_one + 31 - 8;
        for (uint32_t j = 0; j < depth; j++) {
            const int32_t k = max - load8(in, first + j, TYPE);
            int64_t v = type_lo;
            if (k <= radius) {
                v = rounding_divide_by_pot(doubling_high_mul(scale, exps[k]), exponent) +
                    (TYPE == NNB_OUT_UINT8 ? 0 : -128);
                v = v < type_lo ? type_lo : v > type_hi ? type_hi : v;
            }
            store8(out, first + j, (int32_t)v, TYPE);
        }
    }
}

int nnb_softmax_quant8(const void *in, uint64_t rows, uint32_t depth, const int32_t *exps,
                       int64_t radius, int type, void *out) {
    int32_t type_lo, type_hi;
    if (in == NULL || exps == NULL || out == NULL || depth == 0 ||
        !type_range(type, &type_lo, &type_hi))
        return -EINVAL;
    if (type == NNB_OUT_UINT8)
        softmax_rows(in, rows, depth, exps, radius, out, NNB_OUT_UINT8);
    else
        softmax_rows(in, rows, depth, exps, radius, out, NNB_OUT_INT8);
    return 0;
}

/* QUANTIZE's float32 steps on HALF lanes, with vector extensions: written
 * as a scalar loop, GCC keeps its float compares as branches (each may
 * trap, under the default -ftrapping-math), which mispredicted on real data
 * at ~12 ns an element.  Every step runs in every lane; only the selects
 * depend on the data. */
static inline __attribute__((always_inline)) void quantize_block(const float *in, uint64_t n,
                                                                 float scale, float zero_point,
                                                                 float lo, float hi,
                                                                 uint8_t *out) {
    half_t v = {0};
    memcpy(&v, in, n * sizeof(float)); /* a last, short block: zeros past its end */
    const half_mask_t sign = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN,
                              INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
    v = v / scale;
    const half_t magnitude = (half_t)((half_mask_t)v & ~sign);
    /* From 2^23 up every float is an integer, and so are the infinities; a
     * NaN fails the test too and stays as it is. */
    const half_mask_t small = magnitude < 8388608.0f;
    const half_t bounded = (half_t)((half_mask_t)magnitude & small); /* converts safely */
    const half_t whole = __builtin_convertvector(__builtin_convertvector(bounded, half_mask_t),
                                                 half_t); /* truncf */
    const half_mask_t up = bounded - whole >= 0.5f;      /* half away from zero */
    const half_t one = (half_t){0} + 1.0f;
    const half_t rounded = whole + (half_t)((half_mask_t)one & up);
    const half_t signed_rounded = (half_t)((half_mask_t)rounded | ((half_mask_t)v & sign));
    half_t q = (half_t)(((half_mask_t)signed_rounded & small) | ((half_mask_t)v & ~small));
    q = q + zero_point;
    /* Clamp; a NaN goes to the top (std::min(hi, NaN) keeps hi). */
    const half_t top = (half_t){0} + hi, bottom = (half_t){0} + lo;
    const half_mask_t high = (q > hi) | (q != q), low = q < lo;
    q = (half_t)(((half_mask_t)top & high) | ((half_mask_t)q & ~high));
    q = (half_t)(((half_mask_t)bottom & low) | ((half_mask_t)q & ~low));
    /* Each an integer in [lo, hi]: its low byte (little-endian: the first of
     * its four) is the 8-bit value.  A shuffle, where a conversion to bytes
     * went lane by lane through general registers. */
    const lane_bytes_t bytes = (lane_bytes_t)__builtin_convertvector(q, half_mask_t);
    const lane_bytes_t firsts = __builtin_shuffle(bytes, (lane_bytes_t){0, 4, 8, 12, 16, 20, 24, 28});
    memcpy(out, &firsts, n);
}

MACHINE_CLONES
static void quantize(const float *in, uint64_t count, float scale, float zero_point, void *out,
                     int type) {
    const float lo = type == NNB_OUT_UINT8 ? 0.0f : -128.0f;
    const float hi = type == NNB_OUT_UINT8 ? 255.0f : 127.0f;
    uint64_t i = 0;
    for (; i + HALF <= count; i += HALF) /* whole blocks: fixed-size copies, inlined */
        quantize_block(in + i, HALF, scale, zero_point, lo, hi, (uint8_t *)out + i);
    if (i < count) quantize_block(in + i, count - i, scale, zero_point, lo, hi, (uint8_t *)out + i);
}

int nnb_quantize_f32(const float *in, uint64_t count, float scale, int32_t zero_point,
                     int out_type, void *out) {
    int32_t type_lo, type_hi;
    if (in == NULL || out == NULL || !type_range(out_type, &type_lo, &type_hi)) return -EINVAL;
    quantize(in, count, scale, (float)zero_point, out, out_type);
    return 0;
}
