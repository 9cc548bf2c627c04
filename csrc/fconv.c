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
 * one (its panel padded with zeros).
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

/* Sizes of a valid layer: taps, K, tiles.  0 for a layer that makes no
 * sense or whose sizes could overflow. */
struct sizes {
    int64_t taps, k, tiles;
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
    s->tiles = (c->out_c + NR - 1) / NR;
    if (s->tiles > (LIMIT >> 2) / (s->k + 1)) return 0; /* the packed floats */
    return 1;
}

int64_t nnb_fconv_packed_bytes(const struct nnb_fconv *layer) {
    struct sizes s;
    if (!layer_sizes(layer, &s)) return -EINVAL;
    return (int64_t)sizeof(float) * s.tiles * NR * (1 + s.k);
}

int64_t nnb_fconv_scratch_bytes(const struct nnb_fconv *layer) {
    struct sizes s;
    if (!layer_sizes(layer, &s)) return -EINVAL;
    /* the table of MR pointers a tap, then the row of zeros */
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
    return 0;
}

/* One tile: `used` (1..MR) pixels, whose tap k values start at
 * table[k * MR + m] (the pixels past `used` repeat a used one), times one
 * panel, clamped into out (rows `stride` floats apart), `channels` (1..NR)
 * of them. */
typedef void tile_fn(const float *const *table, int64_t taps, int64_t in_c, const float *panel,
                     float lo, float hi, float *out, int64_t stride, int used, int channels);

static void tile_portable(const float *const *table, int64_t taps, int64_t in_c,
                          const float *panel, float lo, float hi, float *out, int64_t stride,
                          int used, int channels) {
    float acc[MR][NR];
    for (int m = 0; m < MR; m++) memcpy(acc[m], panel, sizeof acc[m]);
    const float *w = panel + NR;
    for (int64_t k = 0; k < taps; k++, table += MR)
        for (int64_t c = 0; c < in_c; c++, w += NR)
            for (int m = 0; m < MR; m++) {
                const float a = table[m][c];
                for (int n = 0; n < NR; n++) acc[m][n] += a * w[n];
            }
    for (int m = 0; m < used; m++)
        for (int n = 0; n < channels; n++) {
            const float v = acc[m][n]; /* a NaN fails both tests and stays */
            out[m * stride + n] = v < lo ? lo : v > hi ? hi : v;
        }
}

#ifdef FCONV_X86
/* vmaxps and vminps return their second operand when either is NaN: with
 * the bound first, a NaN sum stays NaN. */
TARGET_AVX2 static void tile_avx2(const float *const *table, int64_t taps, int64_t in_c,
                                  const float *panel, float lo, float hi, float *out,
                                  int64_t stride, int used, int channels) {
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

/* Every output pixel, MR at a time: their table of tap sources, then each
 * tile. */
static void run_layer(const struct nnb_fconv *c, const struct sizes *s, const float *packed,
                      const float *in, int64_t pixels, float *out, const float **table,
                      const float *zeros, tile_fn *tile) {
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
    float *zeros = (float *)(table + MR * s.taps);
    memset(zeros, 0, (size_t)layer->in_c * sizeof(float));
    const int64_t pixels = batches * layer->out_h * layer->out_w;
    tile_fn *tile = tile_portable;
#ifdef FCONV_X86
    if (chosen == NNB_FCONV_AVX2) tile = tile_avx2;
#endif
    run_layer(layer, &s, packed, in, pixels, out, table, zeros, tile);
    return 0;
}
