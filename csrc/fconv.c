/* Float32 convolution and fully connected layers on packed weights (fconv.h).
 *
 * Why: kernels.c's nnb_conv_f32 reads the weights as a [K, cols] matrix
 * (each tap's 16-channel row 4*cols bytes from the next) and keeps a block
 * of 4 pixels x 16 channels on AVX2: 8 sums, 2 weight loads and 4
 * broadcasts for every 8 FMAs.  A 1x1 layer went to BLAS, then a numpy
 * pass for the bias and another for the clamp.  Here the weights are
 * packed once into panels of 16 channels read front to back, a tile keeps
 * 6 pixels x 16 channels (12 of AVX2's 16 registers: 12 FMAs for 2 weight
 * loads and 6 broadcasts), the bias is the sums' first value and the clamp
 * happens on the way out.
 *
 * How (an indirect matrix product): output pixels are taken MR at a time,
 * in order across rows and images.  For each tap of each of those pixels a
 * table holds where its in_c input values start: the input pixel, or a row
 * of zeros for a tap in the padding, so the micro-kernel never checks a
 * bound; a 1x1 layer and a fully connected one are the case of one tap.
 * The micro-kernel then runs every tap's in_c values against one panel:
 *   panel t = bias[16], then weights[K][16] (K = taps * in_c),
 * channels first(t) .. first(t) + 15, where first(t) = 16 t except that a
 * last tile past out_c ends at out_c instead (it overlaps the tile before,
 * whose channels it computes again to the same values), so that every
 * store is a whole vector; only a layer under 16 channels stores part of
 * one (its panel padded with zeros).  A layer 1-8 channels past a multiple
 * of 16 (24, 40, 88) ends instead with a half panel, rows of 8, for its
 * last 8 channels: a 6 x 8 tile, where a last tile of 16 computed up to 15
 * channels twice (a third of a 24-channel layer's FMAs).
 *
 * Paths: portable C (the fallback and what the AVX2 kernel is tested
 * against) and AVX2 with FMA, chosen at run time by __builtin_cpu_supports
 * (kernels.c's ifunc clones pick the same way).  Both read one layout.
 * The FMAs round once per product where the portable path (without
 * contraction) rounds twice: the two agree to float32 rounding, not bit for
 * bit, as BLAS and the reference do. */

#include "fconv.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define MR 6  /* output pixels a tile */
#define NR 16 /* output channels a tile */
#define LIMIT ((int64_t)1 << 30)

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FCONV_X86 1
#include <immintrin.h>
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

/* Sizes of a valid layer: taps, K, tiles of 16 channels, and whether a
 * last tile of 8 follows them (half).  0 for a layer that makes no sense or
 * whose sizes could overflow. */
struct sizes {
    int64_t taps, k, tiles, half;
};

static int layer_sizes(const struct nnb_fconv *c, struct sizes *s) {
    if (c == NULL || !(c->lo <= c->hi)) return 0; /* a NaN bound too */
    const int64_t dims[] = {c->in_h,       c->in_w,     c->in_c,     c->filter_h,
                            c->filter_w,   c->stride_h, c->stride_w, c->dilation_h,
                            c->dilation_w, c->out_h,    c->out_w,    c->out_c};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i] < 1 || dims[i] > LIMIT) return 0;
    if (c->pad_top < 0 || c->pad_top > LIMIT || c->pad_left < 0 || c->pad_left > LIMIT) return 0;
    /* Each product below stays under 2^62: every factor is at most 2^30 and
     * the pairs are checked before the third factor. */
    if (c->in_h > LIMIT / c->in_w || c->in_h * c->in_w > LIMIT / c->in_c) return 0;
    if (c->out_h > LIMIT / c->out_w || c->out_h * c->out_w > LIMIT / c->out_c) return 0;
    if (c->filter_h > LIMIT / c->filter_w || c->filter_h * c->filter_w > LIMIT / c->in_c) return 0;
    s->taps = c->filter_h * c->filter_w;
    s->k = s->taps * c->in_c;
    /* past a multiple of 16 by 1-8 channels: a last tile of 8 (out_c 24:
     * 16 + 8 where two tiles of 16 computed 32 sums) */
    s->half = c->out_c > NR && c->out_c % NR > 0 && c->out_c % NR <= NR / 2;
    s->tiles = s->half ? c->out_c / NR : (c->out_c + NR - 1) / NR;
    if (s->tiles + 1 > (LIMIT >> 2) / (s->k + 1)) return 0; /* the packed floats */
    return 1;
}

/* A layer of under ROWS_BELOW input channels and dilation 1 across (a first
 * layer on RGB) runs a filter row as one tap of filter_w * in_c floats:
 * they follow one another in the input and in the packed K order alike.
 * Tap by tap, each tap of 3 channels cost the tile 6 pointer loads and a
 * loop's bookkeeping for 3 steps of FMAs, and nnb_conv_f32 won.  A window
 * row partly in the padding is gathered into the scratch with its zeros. */
#define ROWS_BELOW 8

static int by_rows(const struct nnb_fconv *c) {
    return c->in_c < ROWS_BELOW && c->dilation_w == 1;
}

int64_t nnb_fconv_packed_bytes(const struct nnb_fconv *layer) {
    struct sizes s;
    if (!layer_sizes(layer, &s)) return -EINVAL;
    return (int64_t)sizeof(float) * (s.tiles * NR + s.half * NR / 2) * (1 + s.k);
}

int64_t nnb_fconv_scratch_bytes(const struct nnb_fconv *layer) {
    struct sizes s;
    if (!layer_sizes(layer, &s)) return -EINVAL;
    /* the table of MR pointers a tap, then the row of zeros; by rows, the
     * zeros are a filter row's, then MR windows for the rows gathered */
    if (by_rows(layer))
        return (int64_t)sizeof(const float *) * MR * layer->filter_h +
               (int64_t)sizeof(float) * (layer->filter_w * layer->in_c + MR * s.k);
    return (int64_t)sizeof(const float *) * MR * s.taps + (int64_t)sizeof(float) * layer->in_c;
}

/* Tile t's first output channel (see the top of this file). */
static int64_t first_channel(const struct nnb_fconv *c, int64_t t) {
    const int64_t first = t * NR;
    return c->out_c >= NR && first + NR > c->out_c ? c->out_c - NR : first;
}

int nnb_fconv_pack(const struct nnb_fconv *layer, const float *weights, const float *bias,
                   void *packed, int64_t packed_bytes) {
    struct sizes s;
    if (!layer_sizes(layer, &s) || weights == NULL || bias == NULL || packed == NULL ||
        (uintptr_t)packed % sizeof(float) || packed_bytes != nnb_fconv_packed_bytes(layer))
        return -EINVAL;
    const int64_t n = layer->out_c;
    const int64_t channels = n < NR ? n : NR;
    float *p = packed;
    memset(p, 0, (size_t)packed_bytes);
    for (int64_t t = 0; t < s.tiles; t++) {
        const int64_t first = first_channel(layer, t);
        float *panel = p + t * NR * (1 + s.k);
        memcpy(panel, bias + first, (size_t)channels * sizeof(float));
        for (int64_t r = 0; r < s.k; r++)
            memcpy(panel + NR * (1 + r), weights + r * n + first,
                   (size_t)channels * sizeof(float));
    }
    if (s.half) { /* the last 8 channels, rows of 8 */
        const int64_t first = n - NR / 2;
        float *panel = p + s.tiles * NR * (1 + s.k);
        memcpy(panel, bias + first, (size_t)(NR / 2) * sizeof(float));
        for (int64_t r = 0; r < s.k; r++)
            memcpy(panel + NR / 2 * (1 + r), weights + r * n + first,
                   (size_t)(NR / 2) * sizeof(float));
    }
    return 0;
}

/* One tile: `used` (1..MR) pixels, whose tap k values start at
 * table[k * MR + m] (the pixels past `used` repeat a used one), times one
 * panel, clamped into out (rows `stride` floats apart), `channels` (1..NR)
 * of them.  A half tile's panel has rows of NR / 2 and `channels` NR / 2. */
typedef void tile_fn(const float *const *table, int64_t taps, int64_t in_c, const float *panel,
                     float lo, float hi, float *out, int64_t stride, int used, int channels);

static inline void tile_portable_of(const float *const *table, int64_t taps, int64_t in_c,
                                    const float *panel, float lo, float hi, float *out,
                                    int64_t stride, int used, int channels, const int WIDTH) {
    float acc[MR][NR];
    for (int m = 0; m < MR; m++) memcpy(acc[m], panel, sizeof(float) * WIDTH);
    const float *w = panel + WIDTH;
    for (int64_t k = 0; k < taps; k++, table += MR)
        for (int64_t c = 0; c < in_c; c++, w += WIDTH)
            for (int m = 0; m < MR; m++) {
                const float a = table[m][c];
                for (int n = 0; n < WIDTH; n++) acc[m][n] += a * w[n];
            }
    for (int m = 0; m < used; m++)
        for (int n = 0; n < channels; n++) {
            const float v = acc[m][n]; /* a NaN fails both tests and stays */
            out[m * stride + n] = v < lo ? lo : v > hi ? hi : v;
        }
}

static void tile_portable(const float *const *table, int64_t taps, int64_t in_c,
                          const float *panel, float lo, float hi, float *out, int64_t stride,
                          int used, int channels) {
    tile_portable_of(table, taps, in_c, panel, lo, hi, out, stride, used, channels, NR);
}

static void half_portable(const float *const *table, int64_t taps, int64_t in_c,
                          const float *panel, float lo, float hi, float *out, int64_t stride,
                          int used, int channels) {
    tile_portable_of(table, taps, in_c, panel, lo, hi, out, stride, used, channels, NR / 2);
}

#ifdef FCONV_X86
/* The clamped sums of one row of a tile into out, `channels` of them
 * (vmaxps and vminps return their second operand when either is NaN: with
 * the bound first, a NaN sum stays NaN). */
TARGET_AVX2 static inline void store_row_avx2(__m256 s0, __m256 s1, float lo, float hi, float *out,
                                              int channels) {
    const __m256 low = _mm256_set1_ps(lo), high = _mm256_set1_ps(hi);
    s0 = _mm256_min_ps(high, _mm256_max_ps(low, s0));
    s1 = _mm256_min_ps(high, _mm256_max_ps(low, s1));
    if (channels == NR) {
        _mm256_storeu_ps(out, s0);
        _mm256_storeu_ps(out + 8, s1);
        return;
    }
    const __m256i count = _mm256_set1_epi32(channels);
    _mm256_maskstore_ps(out, _mm256_cmpgt_epi32(count, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                        s0);
    _mm256_maskstore_ps(out + 8,
                        _mm256_cmpgt_epi32(count, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15)),
                        s1);
}

/* A tile of one pixel (a fully connected layer's single row, a last short
 * block): the 6-row tile would compute it 6 times over; here 4 pairs of
 * sums take every fourth weight row each, so that 8 FMA chains are in
 * flight and the loop runs at the speed of reading the panel. */
TARGET_AVX2 static void tile_one_avx2(const float *const *table, int64_t taps, int64_t in_c,
                                      const float *panel, float lo, float hi, float *out,
                                      int channels) {
    __m256 a0 = _mm256_loadu_ps(panel), a1 = _mm256_loadu_ps(panel + 8);
    __m256 b0 = _mm256_setzero_ps(), b1 = b0, c0 = b0, c1 = b0, d0 = b0, d1 = b0;
    const float *w = panel + NR;
    for (int64_t k = 0; k < taps; k++) {
        const float *a = table[k * MR];
        int64_t c = 0;
        for (; c + 4 <= in_c; c += 4, w += 4 * NR) {
            __m256 v = _mm256_broadcast_ss(a + c);
            a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w), a0);
            a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + 8), a1);
            v = _mm256_broadcast_ss(a + c + 1);
            b0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + NR), b0);
            b1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + NR + 8), b1);
            v = _mm256_broadcast_ss(a + c + 2);
            c0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + 2 * NR), c0);
            c1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + 2 * NR + 8), c1);
            v = _mm256_broadcast_ss(a + c + 3);
            d0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + 3 * NR), d0);
            d1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + 3 * NR + 8), d1);
        }
        for (; c < in_c; c++, w += NR) {
            const __m256 v = _mm256_broadcast_ss(a + c);
            a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w), a0);
            a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + 8), a1);
        }
    }
    a0 = _mm256_add_ps(_mm256_add_ps(a0, b0), _mm256_add_ps(c0, d0));
    a1 = _mm256_add_ps(_mm256_add_ps(a1, b1), _mm256_add_ps(c1, d1));
    store_row_avx2(a0, a1, lo, hi, out, channels);
}

/* A half tile: 6 pixels x 8 channels, all 8 stored. */
TARGET_AVX2 static void half_avx2(const float *const *table, int64_t taps, int64_t in_c,
                                  const float *panel, float lo, float hi, float *out,
                                  int64_t stride, int used, int channels) {
    (void)channels;
    const __m256 bias = _mm256_loadu_ps(panel);
    __m256 c0 = bias, c1 = bias, c2 = bias, c3 = bias, c4 = bias, c5 = bias;
    const float *w = panel + NR / 2;
    for (int64_t k = 0; k < taps; k++, table += MR) {
        const float *a0 = table[0], *a1 = table[1], *a2 = table[2];
        const float *a3 = table[3], *a4 = table[4], *a5 = table[5];
        for (int64_t c = 0; c < in_c; c++, w += NR / 2) {
            const __m256 w0 = _mm256_loadu_ps(w);
            c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a0 + c), w0, c0);
            c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a1 + c), w0, c1);
            c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a2 + c), w0, c2);
            c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a3 + c), w0, c3);
            c4 = _mm256_fmadd_ps(_mm256_broadcast_ss(a4 + c), w0, c4);
            c5 = _mm256_fmadd_ps(_mm256_broadcast_ss(a5 + c), w0, c5);
        }
    }
    const __m256 low = _mm256_set1_ps(lo), high = _mm256_set1_ps(hi);
    const __m256 rows[MR] = {c0, c1, c2, c3, c4, c5};
    for (int m = 0; m < used; m++, out += stride)
        _mm256_storeu_ps(out, _mm256_min_ps(high, _mm256_max_ps(low, rows[m])));
}

TARGET_AVX2 static void tile_avx2(const float *const *table, int64_t taps, int64_t in_c,
                                  const float *panel, float lo, float hi, float *out,
                                  int64_t stride, int used, int channels) {
    if (used == 1) {
        tile_one_avx2(table, taps, in_c, panel, lo, hi, out, channels);
        return;
    }
    const __m256 bias0 = _mm256_loadu_ps(panel), bias1 = _mm256_loadu_ps(panel + 8);
    __m256 c00 = bias0, c01 = bias1, c10 = bias0, c11 = bias1, c20 = bias0, c21 = bias1;
    __m256 c30 = bias0, c31 = bias1, c40 = bias0, c41 = bias1, c50 = bias0, c51 = bias1;
    const float *w = panel + NR;
    for (int64_t k = 0; k < taps; k++, table += MR) {
        const float *a0 = table[0], *a1 = table[1], *a2 = table[2];
        const float *a3 = table[3], *a4 = table[4], *a5 = table[5];
        for (int64_t c = 0; c < in_c; c++, w += NR) {
            const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
            __m256 v = _mm256_broadcast_ss(a0 + c);
            c00 = _mm256_fmadd_ps(v, w0, c00), c01 = _mm256_fmadd_ps(v, w1, c01);
            v = _mm256_broadcast_ss(a1 + c);
            c10 = _mm256_fmadd_ps(v, w0, c10), c11 = _mm256_fmadd_ps(v, w1, c11);
            v = _mm256_broadcast_ss(a2 + c);
            c20 = _mm256_fmadd_ps(v, w0, c20), c21 = _mm256_fmadd_ps(v, w1, c21);
            v = _mm256_broadcast_ss(a3 + c);
            c30 = _mm256_fmadd_ps(v, w0, c30), c31 = _mm256_fmadd_ps(v, w1, c31);
            v = _mm256_broadcast_ss(a4 + c);
            c40 = _mm256_fmadd_ps(v, w0, c40), c41 = _mm256_fmadd_ps(v, w1, c41);
            v = _mm256_broadcast_ss(a5 + c);
            c50 = _mm256_fmadd_ps(v, w0, c50), c51 = _mm256_fmadd_ps(v, w1, c51);
        }
    }
    const __m256 low = _mm256_set1_ps(lo), high = _mm256_set1_ps(hi);
    __m256 rows[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    if (channels == NR) {
        for (int m = 0; m < used; m++, out += stride) {
            _mm256_storeu_ps(out, _mm256_min_ps(high, _mm256_max_ps(low, rows[m][0])));
            _mm256_storeu_ps(out + 8, _mm256_min_ps(high, _mm256_max_ps(low, rows[m][1])));
        }
        return;
    }
    /* A layer of under 16 channels: lane i stored where i < channels. */
    const __m256i lane0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i lane1 = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
    const __m256i count = _mm256_set1_epi32(channels);
    const __m256i mask0 = _mm256_cmpgt_epi32(count, lane0);
    const __m256i mask1 = _mm256_cmpgt_epi32(count, lane1);
    for (int m = 0; m < used; m++, out += stride) {
        _mm256_maskstore_ps(out, mask0, _mm256_min_ps(high, _mm256_max_ps(low, rows[m][0])));
        _mm256_maskstore_ps(out + 8, mask1, _mm256_min_ps(high, _mm256_max_ps(low, rows[m][1])));
    }
}
#endif

/* Filter row i of output pixel (y, x) of image `image` as a tap of
 * filter_w * in_c floats (see by_rows): where it lies in the input, the
 * row of zeros above or below it, or else gathered into `row` with zeros
 * for its taps left or right of the input. */
static const float *window_row(const struct nnb_fconv *c, const float *image, int64_t y,
                               int64_t x, int64_t i, const float *zeros, float *row) {
    const int64_t in_c = c->in_c, fw = c->filter_w;
    const int64_t in_y = y * c->stride_h - c->pad_top + i * c->dilation_h;
    const int64_t left = x * c->stride_w - c->pad_left;
    if (in_y < 0 || in_y >= c->in_h) return zeros;
    const float *line = image + in_y * c->in_w * in_c;
    if (left >= 0 && left + fw <= c->in_w) return line + left * in_c;
    /* taps [first, end) inside the input */
    int64_t first = left < 0 ? -left : 0, end = c->in_w - left < fw ? c->in_w - left : fw;
    if (first > fw) first = fw;
    if (end < first) end = first;
    memset(row, 0, (size_t)(first * in_c) * sizeof(float));
    if (end > first)
        memcpy(row + first * in_c, line + (left + first) * in_c,
               (size_t)((end - first) * in_c) * sizeof(float));
    memset(row + end * in_c, 0, (size_t)((fw - end) * in_c) * sizeof(float));
    return row;
}

/* A layer by rows (see by_rows): every output pixel, MR at a time, a tap a
 * filter row. */
static void run_rows(const struct nnb_fconv *c, const struct sizes *s, const float *packed,
                     const float *in, int64_t pixels, float *out, const float **table,
                     const float *zeros, float *rows, tile_fn *tile, tile_fn *half) {
    const int64_t out_c = c->out_c, fh = c->filter_h, row_k = c->filter_w * c->in_c;
    const int channels = out_c < NR ? (int)out_c : NR;
    int64_t b = 0, y = 0, x = 0;
    for (int64_t p = 0; p < pixels; p += MR) {
        const int used = pixels - p < MR ? (int)(pixels - p) : MR;
        for (int m = 0; m < used; m++) {
            const float *image = in + b * c->in_h * c->in_w * c->in_c;
            const int64_t left = x * c->stride_w - c->pad_left;
            if (left >= 0 && left + c->filter_w <= c->in_w) {
                /* inside across (most pixels): a row's pointer or the zeros,
                 * without window_row's tests and call (it cost a first layer
                 * on RGB two thirds of its FMAs' time) */
                const float *at = image + left * c->in_c;
                const int64_t top = y * c->stride_h - c->pad_top;
                for (int64_t i = 0; i < fh; i++) {
                    const int64_t in_y = top + i * c->dilation_h;
                    table[i * MR + m] =
                        in_y >= 0 && in_y < c->in_h ? at + in_y * c->in_w * c->in_c : zeros;
                }
            } else {
                for (int64_t i = 0; i < fh; i++)
                    table[i * MR + m] =
                        window_row(c, image, y, x, i, zeros, rows + (m * fh + i) * row_k);
            }
            if (++x == c->out_w) {
                x = 0;
                if (++y == c->out_h) y = 0, b++;
            }
        }
        for (int m = used; m < MR; m++)
            for (int64_t i = 0; i < fh; i++) table[i * MR + m] = table[i * MR + used - 1];
        for (int64_t t = 0; t < s->tiles; t++)
            tile(table, fh, row_k, packed + t * NR * (1 + s->k), c->lo, c->hi,
                 out + p * out_c + first_channel(c, t), out_c, used, channels);
        if (s->half)
            half(table, fh, row_k, packed + s->tiles * NR * (1 + s->k), c->lo, c->hi,
                 out + p * out_c + out_c - NR / 2, out_c, used, NR / 2);
    }
}

/* A 1x1 layer at stride 1 with as many output pixels as input ones (so
 * without padding), and a fully connected one: output pixel p reads input
 * pixel p, so a block's table is its MR row starts.  run_layer's general
 * table (a bounds test a tap, counters a pixel) cost a 16-channel layer of
 * 24 inputs as much as its FMAs. */
static int pointwise(const struct nnb_fconv *c) {
    return c->filter_h == 1 && c->filter_w == 1 && c->stride_h == 1 && c->stride_w == 1 &&
           c->out_h == c->in_h && c->out_w == c->in_w;
}

static void run_pointwise(const struct nnb_fconv *c, const struct sizes *s, const float *packed,
                          const float *in, int64_t pixels, float *out, const float **table,
                          tile_fn *tile, tile_fn *half) {
    const int64_t in_c = c->in_c, out_c = c->out_c;
    const int channels = out_c < NR ? (int)out_c : NR;
    for (int64_t p = 0; p < pixels; p += MR) {
        const int used = pixels - p < MR ? (int)(pixels - p) : MR;
        for (int m = 0; m < MR; m++) /* a short last block repeats its last pixel */
            table[m] = in + (p + (m < used ? m : used - 1)) * in_c;
        for (int64_t t = 0; t < s->tiles; t++)
            tile(table, 1, in_c, packed + t * NR * (1 + s->k), c->lo, c->hi,
                 out + p * out_c + first_channel(c, t), out_c, used, channels);
        if (s->half)
            half(table, 1, in_c, packed + s->tiles * NR * (1 + s->k), c->lo, c->hi,
                 out + p * out_c + out_c - NR / 2, out_c, used, NR / 2);
    }
}

/* Every output pixel, MR at a time: their table of tap sources, then each
 * tile. */
static void run_layer(const struct nnb_fconv *c, const struct sizes *s, const float *packed,
                      const float *in, int64_t pixels, float *out, const float **table,
                      const float *zeros, tile_fn *tile, tile_fn *half) {
    const int64_t in_c = c->in_c, out_c = c->out_c;
    const int channels = out_c < NR ? (int)out_c : NR;
    int64_t b = 0, y = 0, x = 0; /* the next pixel's, counted (no division a pixel) */
    for (int64_t p = 0; p < pixels; p += MR) {
        const int used = pixels - p < MR ? (int)(pixels - p) : MR;
        for (int m = 0; m < used; m++) {
            const float *image = in + b * c->in_h * c->in_w * in_c;
            const int64_t top = y * c->stride_h - c->pad_top;
            const int64_t left = x * c->stride_w - c->pad_left;
            for (int64_t i = 0, k = 0; i < c->filter_h; i++) {
                const int64_t in_y = top + i * c->dilation_h;
                const int row_inside = in_y >= 0 && in_y < c->in_h;
                for (int64_t j = 0; j < c->filter_w; j++, k++) {
                    const int64_t in_x = left + j * c->dilation_w;
                    table[k * MR + m] = row_inside && in_x >= 0 && in_x < c->in_w
                                            ? image + (in_y * c->in_w + in_x) * in_c
                                            : zeros;
                }
            }
            if (++x == c->out_w) {
                x = 0;
                if (++y == c->out_h) y = 0, b++;
            }
        }
        for (int m = used; m < MR; m++) /* a short last block repeats its last pixel */
            for (int64_t k = 0; k < s->taps; k++) table[k * MR + m] = table[k * MR + used - 1];
        for (int64_t t = 0; t < s->tiles; t++)
            tile(table, s->taps, in_c, packed + t * NR * (1 + s->k), c->lo, c->hi,
                 out + p * out_c + first_channel(c, t), out_c, used, channels);
        if (s->half)
            half(table, s->taps, in_c, packed + s->tiles * NR * (1 + s->k), c->lo, c->hi,
                 out + p * out_c + out_c - NR / 2, out_c, used, NR / 2);
    }
}

int nnb_fconv_path(int path) {
#ifdef FCONV_X86
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    const int avx2 = 0;
#endif
    if (path == NNB_FCONV_BEST) return avx2 ? NNB_FCONV_AVX2 : NNB_FCONV_PORTABLE;
    if (path == NNB_FCONV_PORTABLE || (path == NNB_FCONV_AVX2 && avx2)) return path;
    return -ENOTSUP;
}

int nnb_fconv_run(const struct nnb_fconv *layer, const void *packed, int64_t packed_bytes,
                  const float *in, int64_t batches, float *out, void *scratch,
                  int64_t scratch_bytes, int path) {
    struct sizes s;
    if (!layer_sizes(layer, &s) || packed == NULL || in == NULL || out == NULL ||
        scratch == NULL || (uintptr_t)packed % sizeof(float) ||
        (uintptr_t)scratch % sizeof(const float *) ||
        packed_bytes != nnb_fconv_packed_bytes(layer) ||
        scratch_bytes < nnb_fconv_scratch_bytes(layer) || batches < 0 ||
        (batches > 0 && batches > LIMIT / (layer->in_h * layer->in_w * layer->in_c)) ||
        (batches > 0 && batches > LIMIT / (layer->out_h * layer->out_w * layer->out_c)))
        return -EINVAL;
    const int chosen = nnb_fconv_path(path);
    if (chosen < 0) return chosen;
    const float **table = scratch;
    const int rows = by_rows(layer);
    float *zeros = (float *)(table + MR * (rows ? layer->filter_h : s.taps));
    const int64_t zero_count = rows ? layer->filter_w * layer->in_c : layer->in_c;
    memset(zeros, 0, (size_t)zero_count * sizeof(float));
    const int64_t pixels = batches * layer->out_h * layer->out_w;
    tile_fn *tile = tile_portable, *half = half_portable;
#ifdef FCONV_X86
    if (chosen == NNB_FCONV_AVX2) tile = tile_avx2, half = half_avx2;
#endif
    if (rows)
        run_rows(layer, &s, packed, in, pixels, out, table, zeros, zeros + zero_count, tile,
                 half);
    else if (pointwise(layer))
        run_pointwise(layer, &s, packed, in, pixels, out, table, tile, half);
    else
        run_layer(layer, &s, packed, in, pixels, out, table, zeros, tile, half);
    return 0;
}

/* Depthwise convolution (fconv.h).  Every output channel reads only its own
 * input channel, so there is no product to share across channels; what a
 * tile can share is the input: along a row, the 8 output pixels of a block
 * read overlapping windows, so each input vector is loaded once and
 * multiplied by the weight of every tap that reads it (for a 5-wide filter
 * at stride 1: 12 loads for 40 FMAs, where a load per FMA was the bound).
 * On the vector path with channels in whole vectors of 8, the loop reads
 * the input rows in place: the windows inside a row check nothing, the few
 * at its ends reaching into the padding check each tap (a padded copy of
 * each input row cost a strided layer 4 input pixels an output, and it
 * lost to kernels.c's loop, which reads in place).  Otherwise the input
 * rows an output row reads are first copied into a ring in the scratch,
 * with their padding written as zeros and their channels rounded up to 8
 * (zeros), so the loop reads whole vectors and checks nothing; each input
 * row is copied once, and the ring (a filter's height of rows) stays in
 * cache where a padded copy of a whole image did not.  The packed layout: per group of 8 channels, bias[8], then
 * weights[taps][8]. */

#define DW_LANES 8  /* channels a vector */
#define DW_PIXELS 8 /* output pixels a block */

/* Sizes of a valid depthwise layer: the padded rows' count (rows) and
 * columns, their channels, the taps, the ring's rows (span: the rows one
 * output row reads). */
struct dw_sizes {
    int64_t rows, cols, channels, taps, span;
};

static int dw_layer_sizes(const struct nnb_fconv *c, struct dw_sizes *d) {
    struct sizes s;
    if (!layer_sizes(c, &s) || c->in_c != c->out_c) return 0;
    /* rows and columns the windows reach, each below 2^31 (all factors at
     * most 2^30 but checked products) */
    if (c->out_h - 1 > LIMIT / c->stride_h || c->filter_h - 1 > LIMIT / c->dilation_h) return 0;
    if (c->out_w - 1 > LIMIT / c->stride_w || c->filter_w - 1 > LIMIT / c->dilation_w) return 0;
    d->span = (c->filter_h - 1) * c->dilation_h + 1;
    d->rows = (c->out_h - 1) * c->stride_h + d->span;
    d->cols = (c->out_w - 1) * c->stride_w + (c->filter_w - 1) * c->dilation_w + 1;
    d->channels = (c->out_c + DW_LANES - 1) / DW_LANES * DW_LANES;
    d->taps = s.taps;
    if (d->span > LIMIT / d->cols || d->span * d->cols > (LIMIT >> 2) / d->channels) return 0;
    if (d->channels / DW_LANES > (LIMIT >> 2) / (d->taps + 1) / DW_LANES) return 0;
    return 1;
}

int64_t nnb_fdwconv_packed_bytes(const struct nnb_fconv *layer) {
    struct dw_sizes d;
    if (!dw_layer_sizes(layer, &d)) return -EINVAL;
    return (int64_t)sizeof(float) * d.channels * (1 + d.taps);
}

int64_t nnb_fdwconv_scratch_bytes(const struct nnb_fconv *layer) {
    struct dw_sizes d;
    if (!dw_layer_sizes(layer, &d)) return -EINVAL;
    /* an output row's filter_h row pointers, then the ring */
    return (int64_t)sizeof(const float *) * layer->filter_h +
           (int64_t)sizeof(float) * d.span * d.cols * d.channels;
}

int nnb_fdwconv_pack(const struct nnb_fconv *layer, const float *weights, const float *bias,
                     void *packed, int64_t packed_bytes) {
    struct dw_sizes d;
    if (!dw_layer_sizes(layer, &d) || weights == NULL || bias == NULL || packed == NULL ||
        (uintptr_t)packed % sizeof(float) || packed_bytes != nnb_fdwconv_packed_bytes(layer))
        return -EINVAL;
    const int64_t n = layer->out_c;
    float *p = packed;
    memset(p, 0, (size_t)packed_bytes);
    for (int64_t g = 0; g < d.channels / DW_LANES; g++) {
        float *group = p + g * DW_LANES * (1 + d.taps);
        const int64_t first = g * DW_LANES;
        const int64_t count = n - first < DW_LANES ? n - first : DW_LANES;
        memcpy(group, bias + first, (size_t)count * sizeof(float));
        for (int64_t k = 0; k < d.taps; k++)
            memcpy(group + DW_LANES * (1 + k), weights + k * n + first,
                   (size_t)count * sizeof(float));
    }
    return 0;
}

/* Padded row r of an image of in into row [cols][channels]: its zeros on
 * the left, the input's pixels (one copy when the channels need no
 * rounding up), its zeros on the right; every float written once. */
static void dw_pad_row(const struct nnb_fconv *c, const struct dw_sizes *d, const float *image,
                       int64_t r, float *row) {
    const int64_t ch = d->channels, row_floats = d->cols * ch;
    /* the input's columns in the copy: [left, right) */
    const int64_t left = c->pad_left < d->cols ? c->pad_left : d->cols;
    const int64_t right = c->pad_left + c->in_w < d->cols ? c->pad_left + c->in_w : d->cols;
    const int64_t in_y = r - c->pad_top;
    if (in_y < 0 || in_y >= c->in_h || right <= left) {
        memset(row, 0, (size_t)row_floats * sizeof(float));
        return;
    }
    const float *source = image + in_y * c->in_w * c->in_c;
    memset(row, 0, (size_t)(left * ch) * sizeof(float));
    if (ch == c->in_c) {
        memcpy(row + left * ch, source, (size_t)((right - left) * ch) * sizeof(float));
    } else {
        for (int64_t q = left; q < right; q++) {
            memcpy(row + q * ch, source + (q - left) * c->in_c, (size_t)c->in_c * sizeof(float));
            memset(row + q * ch + c->in_c, 0, (size_t)(ch - c->in_c) * sizeof(float));
        }
    }
    memset(row + right * ch, 0, (size_t)((d->cols - right) * ch) * sizeof(float));
}

/* Whether a run reads the input's rows in place: the register loop's
 * shapes on the vector path, channels in whole vectors of 8.  The windows
 * wholly inside a row then read it where it is; those reaching into the
 * padding (a few at each end) check each tap; rows above or below the
 * input are a row of zeros (the ring's first).  Else the ring holds padded
 * copies of the rows. */
static int dw_in_place(const struct nnb_fconv *c, const struct dw_sizes *d, int vector);

/* The rows output row y reads, into rows[0..filter_h): in place, or padded
 * in the ring (copied there when not yet: rows below *next are). */
static void dw_ring_rows(const struct nnb_fconv *c, const struct dw_sizes *d, const float *image,
                         int64_t y, float *ring, int64_t *next, const float **rows, int in_place) {
    const int64_t first = y * c->stride_h, row_floats = d->cols * d->channels;
    if (in_place) {
        for (int64_t i = 0; i < c->filter_h; i++) {
            const int64_t in_y = first + i * c->dilation_h - c->pad_top;
            rows[i] = in_y >= 0 && in_y < c->in_h ? image + in_y * c->in_w * c->in_c : ring;
        }
        return;
    }
    for (int64_t r = first > *next ? first : *next; r < first + d->span; r++)
        dw_pad_row(c, d, image, r, ring + r % d->span * row_floats);
    *next = first + d->span;
    for (int64_t i = 0; i < c->filter_h; i++)
        rows[i] = ring + (first + i * c->dilation_h) % d->span * row_floats;
}

/* The plain loop over output row y's padded rows: every shape, and the
 * oracle. */
static void dw_row_portable(const struct nnb_fconv *c, const struct dw_sizes *d,
                            const float *packed, const float *const *rows, float *out) {
    for (int64_t x = 0; x < c->out_w; x++, out += c->out_c)
        for (int64_t ch = 0; ch < c->out_c; ch++) {
            const float *group = packed + ch / DW_LANES * DW_LANES * (1 + d->taps);
            const int64_t lane = ch % DW_LANES;
            float total = group[lane];
            for (int64_t i = 0, k = 0; i < c->filter_h; i++)
                for (int64_t j = 0; j < c->filter_w; j++, k++) {
                    const int64_t q = x * c->stride_w + j * c->dilation_w;
                    total += rows[i][q * d->channels + ch] * group[DW_LANES * (1 + k) + lane];
                }
            out[ch] = total < c->lo ? c->lo : total > c->hi ? c->hi : total;
        }
}

#ifdef FCONV_X86
/* PIXELS output pixels of the output row `out` from column x, channels
 * 8g..8g+7, its rows' column x * STRIDE - shift the first the block reads
 * (shift: the padding left of a row read in place, else 0): every input
 * column q of the block's span loaded once, times the
 * weight of each (pixel p, tap j) with q = p * STRIDE + j.  PIXELS, STRIDE
 * and WIDTH (the filter's) are constants at every call, so the sums and the
 * row's WIDTH weights stay in registers and the tests below fold away. */
TARGET_AVX2 static inline __attribute__((always_inline)) void dw_block_avx2(
    const struct nnb_fconv *c, const struct dw_sizes *d, const float *group,
    const float *const *rows, int64_t shift, float *out, int64_t x, int64_t g, __m256i mask,
    int whole, const int PIXELS, const int STRIDE, const int WIDTH) {
    __m256 acc[DW_PIXELS];
    const __m256 bias = _mm256_loadu_ps(group);
#pragma GCC unroll 8
    for (int p = 0; p < PIXELS; p++) acc[p] = bias;
    for (int64_t i = 0; i < c->filter_h; i++) {
        const float *row = rows[i] + (x * STRIDE - shift) * d->channels + g * DW_LANES;
        const float *w = group + DW_LANES * (1 + i * WIDTH);
        __m256 weight[5];
#pragma GCC unroll 5
        for (int j = 0; j < WIDTH; j++) weight[j] = _mm256_loadu_ps(w + j * DW_LANES);
#pragma GCC unroll 24
        for (int q = 0; q < (PIXELS - 1) * STRIDE + WIDTH; q++) {
            const __m256 v = _mm256_loadu_ps(row + q * d->channels);
#pragma GCC unroll 8
            for (int p = 0; p < PIXELS; p++) {
                const int j = q - p * STRIDE;
                if (j >= 0 && j < WIDTH) acc[p] = _mm256_fmadd_ps(v, weight[j], acc[p]);
            }
        }
    }
    const __m256 low = _mm256_set1_ps(c->lo), high = _mm256_set1_ps(c->hi);
#pragma GCC unroll 8
    for (int p = 0; p < PIXELS; p++) {
        float *o = out + (x + p) * c->out_c + g * DW_LANES;
        const __m256 v = _mm256_min_ps(high, _mm256_max_ps(low, acc[p]));
        if (whole)
            _mm256_storeu_ps(o, v);
        else
            _mm256_maskstore_ps(o, mask, v);
    }
}

/* Output pixel x of a row read in place, its taps checked: those left or
 * right of the input read nothing (a few pixels at each end of a row).  The
 * taps inside are worked out once; 4 groups of channels run at once, so
 * that 4 chains of FMAs are in flight where one group's chain (an FMA's
 * latency a tap) made a checked pixel cost 4 of a block's. */
TARGET_AVX2 static void dw_pixel_checked_avx2(const struct nnb_fconv *c, const struct dw_sizes *d,
                                              const float *packed, const float *const *rows,
                                              float *out, int64_t x) {
    const __m256 low = _mm256_set1_ps(c->lo), high = _mm256_set1_ps(c->hi);
    const int64_t left = x * c->stride_w - c->pad_left, groups = d->channels / DW_LANES;
    const int64_t first = left < 0 ? -left : 0; /* taps [first, end) lie inside */
    const int64_t end = c->in_w - left < c->filter_w ? c->in_w - left : c->filter_w;
    const int64_t step = DW_LANES * (1 + d->taps); /* from one group's packing to the next */
    float *o = out + x * c->out_c;
    int64_t g = 0;
    for (; g + 4 <= groups; g += 4) {
        const float *group = packed + g * step;
        __m256 acc0 = _mm256_loadu_ps(group), acc1 = _mm256_loadu_ps(group + step);
        __m256 acc2 = _mm256_loadu_ps(group + 2 * step), acc3 = _mm256_loadu_ps(group + 3 * step);
        for (int64_t i = 0; i < c->filter_h; i++)
            for (int64_t j = first; j < end; j++) {
                const float *v = rows[i] + (left + j) * d->channels + g * DW_LANES;
                const float *w = group + DW_LANES * (1 + i * c->filter_w + j);
                acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(v), _mm256_loadu_ps(w), acc0);
                acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(v + DW_LANES), _mm256_loadu_ps(w + step),
                                       acc1);
                acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(v + 2 * DW_LANES),
                                       _mm256_loadu_ps(w + 2 * step), acc2);
                acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(v + 3 * DW_LANES),
                                       _mm256_loadu_ps(w + 3 * step), acc3);
            }
        float *og = o + g * DW_LANES;
        _mm256_storeu_ps(og, _mm256_min_ps(high, _mm256_max_ps(low, acc0)));
        _mm256_storeu_ps(og + DW_LANES, _mm256_min_ps(high, _mm256_max_ps(low, acc1)));
        _mm256_storeu_ps(og + 2 * DW_LANES, _mm256_min_ps(high, _mm256_max_ps(low, acc2)));
        _mm256_storeu_ps(og + 3 * DW_LANES, _mm256_min_ps(high, _mm256_max_ps(low, acc3)));
    }
    for (; g < groups; g++) {
        const float *group = packed + g * step;
        __m256 acc = _mm256_loadu_ps(group);
        for (int64_t i = 0; i < c->filter_h; i++)
            for (int64_t j = first; j < end; j++)
                acc = _mm256_fmadd_ps(
                    _mm256_loadu_ps(rows[i] + (left + j) * d->channels + g * DW_LANES),
                    _mm256_loadu_ps(group + DW_LANES * (1 + i * c->filter_w + j)), acc);
        _mm256_storeu_ps(o + g * DW_LANES, _mm256_min_ps(high, _mm256_max_ps(low, acc)));
    }
}

/* PIXELS output pixels from column x, every group of 8 channels: the
 * groups inner, so that the block's input span (a few KB) is read from L1
 * by each group in turn, where a group's whole row before the next group's
 * read each cache line of the rows from L2 once per group (2.2x LiteRT's
 * time on a 112-wide 64-channel stride-2 layer). */
TARGET_AVX2 static inline __attribute__((always_inline)) void dw_column_avx2(
    const struct nnb_fconv *c, const struct dw_sizes *d, const float *packed,
    const float *const *rows, int64_t shift, float *out, int64_t x, __m256i mask, int64_t tail,
    const int PIXELS, const int STRIDE, const int WIDTH) {
    const int64_t groups = d->channels / DW_LANES;
    for (int64_t g = 0; g < groups; g++) {
        const int whole = g < groups - 1 || tail == DW_LANES;
        dw_block_avx2(c, d, packed + g * DW_LANES * (1 + d->taps), rows, shift, out, x, g, mask,
                      whole, PIXELS, STRIDE, WIDTH);
    }
}

/* Output pixels [begin, end) of one row, 8 pixels a block; of the 1-7
 * left, 6 or 7 as a last block of 8 ending at `end` (overlapping the one
 * before, its pixels computed again to the same values), else blocks of 4,
 * 2 and 1 that end exactly at `end`.  A block of 2 or 4 still loads each
 * input vector once for all its pixels (at 5 wide, 6 loads for 10 FMAs); a
 * last block of 8 overlapping by 5 pixels computed a 14-pixel row's 10
 * inner pixels as 16. */
TARGET_AVX2 static inline __attribute__((always_inline)) void dw_row_avx2(
    const struct nnb_fconv *c, const struct dw_sizes *d, const float *packed,
    const float *const *rows, int64_t shift, float *out, int64_t begin, int64_t end,
    const int STRIDE, const int WIDTH) {
    const int64_t groups = d->channels / DW_LANES;
    const int64_t tail = c->out_c - (groups - 1) * DW_LANES; /* the last group's channels */
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)tail),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    int64_t x = begin;
    for (; x + DW_PIXELS <= end; x += DW_PIXELS)
        dw_column_avx2(c, d, packed, rows, shift, out, x, mask, tail, DW_PIXELS, STRIDE, WIDTH);
    if (end - x >= DW_PIXELS - 2 && x > begin) { /* a last block overlapping the one before */
        dw_column_avx2(c, d, packed, rows, shift, out, end - DW_PIXELS, mask, tail, DW_PIXELS,
                       STRIDE, WIDTH);
        return;
    }
    if (end - x >= 4) {
        dw_column_avx2(c, d, packed, rows, shift, out, x, mask, tail, 4, STRIDE, WIDTH);
        x += 4;
    }
    if (end - x >= 2) {
        dw_column_avx2(c, d, packed, rows, shift, out, x, mask, tail, 2, STRIDE, WIDTH);
        x += 2;
    }
    if (end - x >= 1)
        dw_column_avx2(c, d, packed, rows, shift, out, x, mask, tail, 1, STRIDE, WIDTH);
}

/* The shapes with a register loop (stride 1 or 2, 3 or 5 wide, dilation
 * 1); 0 for the others. */
static int dw_avx2_shape(const struct nnb_fconv *c) {
    if (c->dilation_h != 1 || c->dilation_w != 1 || c->stride_h != c->stride_w) return 0;
    if (c->stride_w != 1 && c->stride_w != 2) return 0;
    if (c->filter_w != 3 && c->filter_w != 5) return 0;
    return 1;
}

/* One output row on the register loop: over padded rows, all of it; over
 * rows read in place, the pixels whose windows lie inside the input
 * [inner_begin, inner_end) there, the others checked. */
TARGET_AVX2 static void dw_row_avx2_any(const struct nnb_fconv *c, const struct dw_sizes *d,
                                        const float *packed, const float *const *rows,
                                        float *out, int in_place) {
    int64_t begin = 0, end = c->out_w, shift = 0;
    if (in_place) {
        const int64_t s = c->stride_w;
        shift = c->pad_left;
        begin = (c->pad_left + s - 1) / s; /* the first x with x * s - pad_left >= 0 */
        /* one past the last x with x * s - pad_left + filter_w <= in_w */
        end = c->in_w + c->pad_left >= c->filter_w ? (c->in_w + c->pad_left - c->filter_w) / s + 1
                                                    : 0;
        end = end > c->out_w ? c->out_w : end;
        begin = begin > end ? end : begin;
        for (int64_t x = 0; x < begin; x++) dw_pixel_checked_avx2(c, d, packed, rows, out, x);
        for (int64_t x = end; x < c->out_w; x++) dw_pixel_checked_avx2(c, d, packed, rows, out, x);
        if (begin == end) return;
    }
    if (c->stride_w == 1 && c->filter_w == 3)
        dw_row_avx2(c, d, packed, rows, shift, out, begin, end, 1, 3);
    else if (c->stride_w == 2 && c->filter_w == 3)
        dw_row_avx2(c, d, packed, rows, shift, out, begin, end, 2, 3);
    else if (c->stride_w == 1)
        dw_row_avx2(c, d, packed, rows, shift, out, begin, end, 1, 5);
    else
        dw_row_avx2(c, d, packed, rows, shift, out, begin, end, 2, 5);
}
#endif

#ifdef FCONV_X86
/* The output pixels of a row whose windows reach left or right of the
 * input: read in place, each is a checked pixel, a load per FMA. */
static int64_t dw_edge_pixels(const struct nnb_fconv *c) {
    const int64_t s = c->stride_w;
    int64_t begin = (c->pad_left + s - 1) / s;
    int64_t end = c->in_w + c->pad_left >= c->filter_w ? (c->in_w + c->pad_left - c->filter_w) / s + 1
                                                        : 0;
    end = end > c->out_w ? c->out_w : end;
    begin = begin > end ? end : begin;
    return begin + c->out_w - end;
}

#endif

/* In place unless the checked pixels cost more than copying the rows: a
 * checked pixel costs about half a cycle a tap over a block's pixel (a
 * load per FMA, a test per tap), a row's copy about 2 cycles an input
 * pixel (stride_h * stride_w of them an output pixel), each for 8
 * channels.  Timed on one core, in place won on 112- and 56-wide rows, at
 * stride 2 (4 input pixels copied an output) and on a 64-wide row at 5x5;
 * the ring on 5x5 rows up to 32 wide (4 checked pixels of 14, 28, 32) and
 * 3x3 rows up to 8. */
static int dw_in_place(const struct nnb_fconv *c, const struct dw_sizes *d, int vector) {
#ifdef FCONV_X86
    const int64_t taps = c->filter_h * c->filter_w, s = c->stride_h * c->stride_w;
    return vector && dw_avx2_shape(c) && c->in_c == d->channels &&
           dw_edge_pixels(c) * taps <= 2 * s * c->out_w;
#else
    (void)c, (void)d, (void)vector;
    return 0;
#endif
}

int nnb_fdwconv_run(const struct nnb_fconv *layer, const void *packed, int64_t packed_bytes,
                    const float *in, int64_t batches, float *out, void *scratch,
                    int64_t scratch_bytes, int path) {
    struct dw_sizes d;
    if (!dw_layer_sizes(layer, &d) || packed == NULL || in == NULL || out == NULL ||
        scratch == NULL || (uintptr_t)packed % sizeof(float) ||
        (uintptr_t)scratch % sizeof(const float *) ||
        packed_bytes != nnb_fdwconv_packed_bytes(layer) ||
        scratch_bytes < nnb_fdwconv_scratch_bytes(layer) || batches < 0 ||
        (batches > 0 && batches > LIMIT / (layer->in_h * layer->in_w * layer->in_c)) ||
        (batches > 0 && batches > LIMIT / (layer->out_h * layer->out_w * layer->out_c)))
        return -EINVAL;
    const int chosen = nnb_fconv_path(path);
    if (chosen < 0) return chosen;
    const int64_t in_size = layer->in_h * layer->in_w * layer->in_c;
    const int64_t out_row = layer->out_w * layer->out_c;
    const float **rows = scratch;
    float *ring = (float *)(rows + layer->filter_h);
    const int in_place = dw_in_place(layer, &d, chosen == NNB_FCONV_AVX2);
    if (in_place) memset(ring, 0, (size_t)(d.cols * d.channels) * sizeof(float));
    for (int64_t b = 0; b < batches; b++) {
        int64_t next = 0; /* the first padded row not in the ring yet */
        for (int64_t y = 0; y < layer->out_h; y++) {
            float *o = out + (b * layer->out_h + y) * out_row;
            dw_ring_rows(layer, &d, in + b * in_size, y, ring, &next, rows, in_place);
#ifdef FCONV_X86
            if (chosen == NNB_FCONV_AVX2 && dw_avx2_shape(layer)) {
                dw_row_avx2_any(layer, &d, packed, rows, o, in_place);
                continue;
            }
#endif
            dw_row_portable(layer, &d, packed, rows, o);
        }
    }
    return 0;
}
