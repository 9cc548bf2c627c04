/* Compute kernels numpy has no fast form for.
 *
 * Convolution: numpy's route is an im2col copy and then OpenBLAS, whose
 * sgemm is slow on the tall, narrow products a convolution makes (1024 x
 * 144 by 144 x 32 took 86 us where onnxruntime's whole conv took 54 us).
 * The loop below reads the input in place, never builds the im2col
 * matrix, and keeps a block of pixels x 16-channel tiles of sums in vector
 * registers across every filter tap: each weight vector loaded feeds
 * every pixel of the block, each input value broadcast feeds every tile.
 *
 * Depthwise convolution: every output channel reads only its own input
 * channel, so it is no matrix product and BLAS cannot help; numpy's einsum
 * over a window view ran face_detection_short_range's depthwise layers 5-8x
 * slower than this loop (0.87 ms against 0.10-0.18 ms on its 64x64x24 layer).
 * Pooling: numpy's separable reductions over strided window views cost a
 * pass per tap and an array per pass; this loop reads each window once.
 *
 * Channels are the innermost, contiguous axis (NHWC), so the loop over a
 * block of 8 channels vectorises and its 8 sums stay in registers across
 * the filter taps.
 *
 * The caller owns policy (padding, depth multiplier, bias, activation,
 * quantization); this file owns the arithmetic only, and checks that every
 * index it will touch lies inside the arrays it was given. */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nnburst.h"

#define CHANNEL_BLOCK 8
#define TILE 16 /* output channels per vector */
#define MAX_PIXELS 16
#define MAX_TILES 2

/* 16 floats as one value: GCC and clang lower it to what the target has
 * (one AVX-512 register, two AVX2 ones, four SSE ones). */
typedef float tile_t __attribute__((vector_size(TILE * sizeof(float))));
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

MACHINE_CLONES
static void depthwise(const float *restrict in, int64_t batches, int64_t in_h, int64_t in_w,
                      int64_t channels, const float *restrict weights, int64_t filter_h,
                      int64_t filter_w, int64_t stride_h, int64_t stride_w, int64_t dilation_h,
                      int64_t dilation_w, float *restrict out, int64_t out_h, int64_t out_w) {
    const int64_t row_step = dilation_h * in_w * channels, tap_step = dilation_w * channels;
    for (int64_t b = 0; b < batches; b++)
        for (int64_t y = 0; y < out_h; y++)
            for (int64_t x = 0; x < out_w; x++) {
                float *restrict o = out + ((b * out_h + y) * out_w + x) * channels;
                const float *corner =
                    in + ((b * in_h + y * stride_h) * in_w + x * stride_w) * channels;
                int64_t c0 = 0;
                for (; c0 + CHANNEL_BLOCK <= channels; c0 += CHANNEL_BLOCK) {
                    float sum[CHANNEL_BLOCK] = {0};
                    for (int64_t i = 0; i < filter_h; i++) {
                        const float *pixel = corner + i * row_step + c0;
                        const float *w = weights + i * filter_w * channels + c0;
                        for (int64_t j = 0; j < filter_w; j++, pixel += tap_step, w += channels)
                            for (int k = 0; k < CHANNEL_BLOCK; k++) sum[k] += pixel[k] * w[k];
                    }
                    memcpy(o + c0, sum, sizeof sum);
                }
                for (int64_t c = c0; c < channels; c++) {
                    float sum = 0;
                    for (int64_t i = 0; i < filter_h; i++)
                        for (int64_t j = 0; j < filter_w; j++)
                            sum += corner[i * row_step + j * tap_step + c] *
                                   weights[(i * filter_w + j) * channels + c];
                    o[c] = sum;
                }
            }
}

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

int nnb_depthwise_conv_f32(const float *in, int64_t batches, int64_t in_h, int64_t in_w,
                           int64_t channels, const float *weights, int64_t filter_h,
                           int64_t filter_w, int64_t stride_h, int64_t stride_w,
                           int64_t dilation_h, int64_t dilation_w, float *out, int64_t out_h,
                           int64_t out_w) {
    if (in == NULL || weights == NULL || out == NULL || batches < 1 || channels < 1)
        return -EINVAL;
    if (!window_fits(in_h, out_h, filter_h, stride_h, dilation_h) ||
        !window_fits(in_w, out_w, filter_w, stride_w, dilation_w))
        return -EINVAL;
    depthwise(in, batches, in_h, in_w, channels, weights, filter_h, filter_w, stride_h, stride_w,
              dilation_h, dilation_w, out, out_h, out_w);
    return 0;
}

/* One filter tap for a block: every input channel's weight tiles times
 * each pixel's value.  Pixel p's values start at first + p * step, or, when
 * source is given, at source[p] (a block at the input's edge). */
static inline __attribute__((always_inline)) void conv_taps(
    tile_t acc[MAX_PIXELS][MAX_TILES], const float *first, int64_t step,
    const float *const *source, int64_t c_in, const float *restrict w, int64_t weight_cols,
    const int PIXELS, const int TILES) {
    for (int64_t c = 0; c < c_in; c++, w += weight_cols) {
        tile_t w_tile[MAX_TILES];
#pragma GCC unroll 2
        for (int t = 0; t < TILES; t++) memcpy(&w_tile[t], w + t * TILE, sizeof(tile_t));
#pragma GCC unroll 16
        for (int p = 0; p < PIXELS; p++) {
            const float value = source ? source[p][c] : first[p * step + c];
#pragma GCC unroll 2
            for (int t = 0; t < TILES; t++) acc[p][t] += value * w_tile[t];
        }
    }
}

/* Sums for PIXELS consecutive output pixels of one row and TILES tiles of
 * output channels starting at channel t0: one register block.  PIXELS and
 * TILES are constants at every call, so the arrays below are registers. */
static inline __attribute__((always_inline)) void conv_block(
    const float *restrict in, const struct nnb_window_shape *s, const float *restrict weights,
    int64_t weight_cols, const float *restrict bias, float lo, float hi, float *restrict out,
    const float *zeros, int64_t b, int64_t y, int64_t x, int64_t t0, const int PIXELS,
    const int TILES) {
    tile_t acc[MAX_PIXELS][MAX_TILES]; /* fixed sizes: a variable-length array stays in memory */
#pragma GCC unroll 2
    for (int t = 0; t < TILES; t++) {
        const int64_t first = t0 + t * TILE, count = s->out_c - first < TILE ? s->out_c - first : TILE;
        tile_t start = {0};
        if (count == TILE)
            memcpy(&start, bias + first, sizeof start); /* one vector load */
        else
            memcpy(&start, bias + first, count * sizeof(float));
#pragma GCC unroll 16
        for (int p = 0; p < PIXELS; p++) acc[p][t] = start;
    }
    /* Padding is implicit: a row of taps above or below the input adds
     * nothing and is skipped; in a block with a pixel whose taps reach left
     * or right of the input, that pixel reads a row of zeros there instead. */
    const int64_t c_in = s->in_c, top = y * s->stride_h - s->pad_top;
    const int64_t left = x * s->stride_w - s->pad_left;
    const int inside = left >= 0 && left + (PIXELS - 1) * s->stride_w +
                                            (s->filter_w - 1) * s->dilation_w < s->in_w;
    for (int64_t i = 0; i < s->filter_h; i++) {
        const int64_t in_y = top + i * s->dilation_h;
        if (in_y < 0 || in_y >= s->in_h) continue;
        const float *row = in + (b * s->in_h + in_y) * s->in_w * c_in;
        for (int64_t j = 0; j < s->filter_w; j++) {
            const float *w = weights + (i * s->filter_w + j) * c_in * weight_cols + t0;
            const int64_t tap_x = left + j * s->dilation_w;
            if (inside) {
                conv_taps(acc, row + tap_x * c_in, s->stride_w * c_in, NULL, c_in, w, weight_cols,
                          PIXELS, TILES);
                continue;
            }
            const float *source[MAX_PIXELS];
#pragma GCC unroll 16
            for (int p = 0; p < PIXELS; p++) {
                const int64_t in_x = tap_x + p * s->stride_w;
                source[p] = in_x >= 0 && in_x < s->in_w ? row + in_x * c_in : zeros;
            }
            conv_taps(acc, NULL, 0, source, c_in, w, weight_cols, PIXELS, TILES);
        }
    }
    const half_t low = (half_t){0} + lo, high = (half_t){0} + hi;
    for (int p = 0; p < PIXELS; p++) {
        float *o = out + ((b * s->out_h + y) * s->out_w + x + p) * s->out_c;
        for (int t = 0; t < TILES; t++) {
            const int64_t first = t0 + t * TILE;
            const int64_t count = s->out_c - first < TILE ? s->out_c - first : TILE;
            /* Lanes below lo become lo, above hi become hi, NaN stays NaN (as
             * numpy's maximum and minimum); by halves, with lane masks, see
             * half_t.  Each half is stored on its own: two half stores read
             * back as one whole vector would stall the store forwarding. */
            half_t halves[2];
            memcpy(halves, &acc[p][t], sizeof halves);
            for (int h = 0; h < 2; h++) {
                const int64_t lanes = count - h * HALF;
                if (lanes <= 0) break;
                const half_mask_t below = halves[h] < low, above = halves[h] > high;
                half_mask_t bits = (half_mask_t)halves[h];
                bits = (bits & ~below) | ((half_mask_t)low & below);
                bits = (bits & ~above) | ((half_mask_t)high & above);
                if (lanes >= HALF) {
                    memcpy(o + first + h * HALF, &bits, sizeof bits); /* one vector store */
                } else { /* a copy, so that bits itself needs no address (a stack slot) */
                    float part[HALF];
                    memcpy(part, &bits, sizeof part);
                    memcpy(o + first + h * HALF, part, lanes * sizeof(float));
                }
            }
        }
    }
}

/* Channel tile t0's TILES tiles for every pixel of row y, PIXELS at a
 * time.  The row's last block ends at the row's end and overlaps the one
 * before it (recomputing a few pixels to the same values), so no pixel is
 * left to a slow block of one; rows shorter than PIXELS go 4 and then 1 at
 * a time. */
static inline __attribute__((always_inline)) void conv_row(
    const float *in, const struct nnb_window_shape *s, const float *weights, int64_t weight_cols,
    const float *bias, float lo, float hi, float *out, const float *zeros, int64_t b, int64_t y,
    int64_t t0, const int PIXELS, const int TILES) {
    const int64_t width = s->out_w;
    if (width >= PIXELS) {
        for (int64_t x = 0; x < width; x += PIXELS)
            conv_block(in, s, weights, weight_cols, bias, lo, hi, out, zeros, b, y,
                       x + PIXELS <= width ? x : width - PIXELS, t0, PIXELS, TILES);
        return;
    }
    int64_t x = 0;
    if (PIXELS > 4)
        for (; x + 4 <= width; x += 4)
            conv_block(in, s, weights, weight_cols, bias, lo, hi, out, zeros, b, y, x, t0, 4, TILES);
    for (; x < width; x++)
        conv_block(in, s, weights, weight_cols, bias, lo, hi, out, zeros, b, y, x, t0, 1, TILES);
}

/* Every output row: its channel tiles TILES at a time, PIXELS pixels per
 * block, then a last odd tile with PIXELS x TILES pixels per block, which
 * keeps as many sums in registers. */
static inline __attribute__((always_inline)) void conv_all(
    const float *in, const struct nnb_window_shape *s, const float *weights, int64_t weight_cols,
    const float *bias, float lo, float hi, float *out, const float *zeros, const int PIXELS,
    const int TILES) {
    const int64_t tiles = (s->out_c + TILE - 1) / TILE;
    for (int64_t b = 0; b < s->batches; b++)
        for (int64_t y = 0; y < s->out_h; y++) {
            int64_t t = 0;
            for (; t + TILES <= tiles; t += TILES)
                conv_row(in, s, weights, weight_cols, bias, lo, hi, out, zeros, b, y, t * TILE, PIXELS,
                         TILES);
            for (; t < tiles; t++)
                conv_row(in, s, weights, weight_cols, bias, lo, hi, out, zeros, b, y, t * TILE,
                         PIXELS * TILES, 1);
        }
}

/* The block sizes fit each machine's registers: AVX-512 has 32 vector
 * registers of 16 floats (8 x 2 sums, 2 weight tiles and a broadcast);
 * AVX2 has 16 of 8 floats (4 x 1 sums take 8 of them). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
#define CONV_DISPATCH 1
__attribute__((target("avx512f"))) static void conv_avx512(
    const float *in, const struct nnb_window_shape *s, const float *weights, int64_t weight_cols,
    const float *bias, float lo, float hi, float *out, const float *zeros) {
    conv_all(in, s, weights, weight_cols, bias, lo, hi, out, zeros, 8, 2);
}
__attribute__((target("avx2,fma"))) static void conv_avx2(
    const float *in, const struct nnb_window_shape *s, const float *weights, int64_t weight_cols,
    const float *bias, float lo, float hi, float *out, const float *zeros) {
    conv_all(in, s, weights, weight_cols, bias, lo, hi, out, zeros, 4, 1);
}
#endif

static void conv_portable(const float *in, const struct nnb_window_shape *s, const float *weights,
                          int64_t weight_cols, const float *bias, float lo, float hi, float *out,
                          const float *zeros) {
    conv_all(in, s, weights, weight_cols, bias, lo, hi, out, zeros, 4, 1);
}

static int conv_dispatch(const float *in, const struct nnb_window_shape *s, const float *weights,
                         int64_t weight_cols, const float *bias, float lo, float hi, float *out,
                         const float *zeros, int path);

int nnb_conv_f32(const float *in, const struct nnb_window_shape *shape, const float *weights,
                 int64_t weight_cols, const float *bias, float lo, float hi, float *out,
                 int path) {
    if (in == NULL || shape == NULL || weights == NULL || bias == NULL || out == NULL)
        return -EINVAL;
    const struct nnb_window_shape s = *shape; /* read once: the caller cannot change it midway */
    if (s.batches < 1 || s.in_c < 1 || s.out_c < 1 || weight_cols < s.out_c ||
        weight_cols % TILE != 0)
        return -EINVAL;
    if (!padded_window_fits(s.in_h, s.pad_top, s.pad_bottom, s.out_h, s.filter_h, s.stride_h,
                            s.dilation_h) ||
        !padded_window_fits(s.in_w, s.pad_left, s.pad_right, s.out_w, s.filter_w, s.stride_w,
                            s.dilation_w))
        return -EINVAL;
    const float *zeros = in; /* never read without padding */
    float *zero_row = NULL;
    if (s.pad_top || s.pad_bottom || s.pad_left || s.pad_right) {
        zero_row = calloc((size_t)s.in_c, sizeof(float));
        if (zero_row == NULL) return -ENOMEM;
        zeros = zero_row;
    }
    const int rc = conv_dispatch(in, &s, weights, weight_cols, bias, lo, hi, out, zeros, path);
    free(zero_row);
    return rc;
}

static int conv_dispatch(const float *in, const struct nnb_window_shape *s, const float *weights,
                         int64_t weight_cols, const float *bias, float lo, float hi, float *out,
                         const float *zeros, int path) {
#ifdef CONV_DISPATCH
    const int avx512 = __builtin_cpu_supports("avx512f");
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    const int avx512 = 0, avx2 = 0;
#endif
    if (path == NNB_CONV_BEST) path = avx512 ? NNB_CONV_AVX512 : avx2 ? NNB_CONV_AVX2 : NNB_CONV_PORTABLE;
    switch (path) {
#ifdef CONV_DISPATCH
    case NNB_CONV_AVX512:
        if (!avx512) return -ENOTSUP;
        conv_avx512(in, s, weights, weight_cols, bias, lo, hi, out, zeros);
        return 0;
    case NNB_CONV_AVX2:
        if (!avx2) return -ENOTSUP;
        conv_avx2(in, s, weights, weight_cols, bias, lo, hi, out, zeros);
        return 0;
#endif
    case NNB_CONV_PORTABLE:
        conv_portable(in, s, weights, weight_cols, bias, lo, hi, out, zeros);
        return 0;
    default:
        return -ENOTSUP;
    }
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
                for (; c0 + HALF <= c_count; c0 += HALF) {
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
    if (s.batches < 1 || s.in_c < 1 || s.out_c != s.in_c || s.pad_top || s.pad_bottom ||
        s.pad_left || s.pad_right || (kind != NNB_POOL_MAX && kind != NNB_POOL_SUM))
        return -EINVAL;
    if (!window_fits(s.in_h, s.out_h, s.filter_h, s.stride_h, s.dilation_h) ||
        !window_fits(s.in_w, s.out_w, s.filter_w, s.stride_w, s.dilation_w))
        return -EINVAL;
    pool(in, &s, kind, out);
    return 0;
}
