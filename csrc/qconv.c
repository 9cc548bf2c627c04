/* Quantized convolution and fully connected layers (qconv.h).
 *
 * Why: the float route (kernels.c's nnb_conv_f32 on a zero-point-shifted
 * float32 copy, then nnb_requantize_f32) spent 45% of an int8 ResNet's run
 * on float sums and 17% on a separate requantization pass.  Here the sums
 * are int32 and exact, and each 16-channel tile is requantized while it is
 * still in registers.
 *
 * How: output pixels are taken MR at a time.  Each one's window is copied
 * into a row of int16 (x - zero point; taps in the padding are 0, so the
 * padding needs no correction), K = filter_h*filter_w*in_c long, padded to
 * an even length.  The weights were packed once into 16-channel tiles of
 * int16 pairs, so that one 32-bit broadcast of two row values times one
 * vector of 8 channels x 2 weights is a pmaddwd: 16 exact products summed
 * into 8 int32 lanes (each pair at most 2 * 255 * 255, far from overflow;
 * int8's pmaddubsw would saturate its int16 pair sums at 2 * 255 * 128).
 * A tile of MR (6) rows x 16 channels keeps its sums in registers over all of
 * K, then runs NNAPI's fixed-point requantization on the vectors and
 * stores 16 bytes a row; the last pixels of a layer (all of a one-pixel
 * layer's) take a tile of just their rows.
 *
 * Exactness: pack refuses (-ERANGE) a layer whose largest possible sum plus
 * bias could leave int32 (255 * sum |w| + |bias| per channel), so int32
 * arithmetic never wraps and gives the reference's int64 total.
 *
 * Paths: portable C (the oracle and the fallback, and what the AVX2 loop is
 * tested against) and AVX2, chosen at run time by __builtin_cpu_supports.
 * Both read one packed layout. */

#include "qconv.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define MR 6     /* output pixels a tile */
#define NR 16    /* output channels a tile */
#define PARAMS 5 /* int32 arrays of Np: bias, multiplier, left, right, right mask */
#define LIMIT ((int64_t)1 << 30)

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define QCONV_X86 1
#include <immintrin.h>
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

/* Sizes of a valid layer: K, K rounded up to even, Np (out_c rounded up to
 * NR).  0 for a layer that makes no sense or whose sizes could overflow. */
struct sizes {
    int64_t k, k_even, n_padded;
};

static int type_range(int32_t type, int32_t *lo, int32_t *hi) {
    if (type == NNB_QCONV_INT16) {
        *lo = INT16_MIN, *hi = INT16_MAX;
        return 1;
    }
    if (type == NNB_QCONV_UINT8) {
        *lo = 0, *hi = 255;
        return 1;
    }
    if (type == NNB_QCONV_INT8) {
        *lo = -128, *hi = 127;
        return 1;
    }
    return 0;
}

static int layer_sizes(const struct nnb_qconv *c, struct sizes *s) {
    int32_t in_lo, in_hi, out_lo, out_hi;
    if (c == NULL || c->input_type == NNB_QCONV_INT16 ||
        !type_range(c->input_type, &in_lo, &in_hi) ||
        !type_range(c->output_type, &out_lo, &out_hi))
        return 0;
    const int64_t dims[] = {c->in_h,     c->in_w,       c->in_c,       c->filter_h,
                            c->filter_w, c->stride_h,   c->stride_w,   c->dilation_h,
                            c->dilation_w, c->out_h,    c->out_w,      c->out_c};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i] < 1 || dims[i] > LIMIT) return 0;
    if (c->pad_top < 0 || c->pad_top > LIMIT || c->pad_left < 0 || c->pad_left > LIMIT) return 0;
    if (c->input_zero_point < in_lo || c->input_zero_point > in_hi ||
        c->output_zero_point < out_lo || c->output_zero_point > out_hi || c->lo < out_lo ||
        c->hi > out_hi || c->lo > c->hi)
        return 0;
    /* Each product below stays under 2^62: every factor is at most 2^30 and
     * the pairs are checked before the third factor. */
    if (c->in_h > LIMIT / c->in_w || c->in_h * c->in_w > LIMIT / c->in_c) return 0;
    if (c->out_h > LIMIT / c->out_w || c->out_h * c->out_w > LIMIT / c->out_c) return 0;
    if (c->filter_h > LIMIT / c->filter_w || c->filter_h * c->filter_w > LIMIT / c->in_c) return 0;
    s->k = c->filter_h * c->filter_w * c->in_c;
    s->k_even = (s->k + 1) / 2 * 2;
    s->n_padded = (c->out_c + NR - 1) / NR * NR;
    if (s->n_padded > (LIMIT >> 4) / (s->k_even / 2 + PARAMS)) return 0;
    return 1;
}

int64_t nnb_qconv_packed_bytes(const struct nnb_qconv *layer) {
    struct sizes s;
    if (!layer_sizes(layer, &s)) return -EINVAL;
    /* the parameter arrays, then int16 weights [Np/NR][k_even/2][NR][2] */
    return (int64_t)sizeof(int32_t) * PARAMS * s.n_padded +
           (int64_t)sizeof(int16_t) * s.n_padded * s.k_even;
}

int64_t nnb_qconv_scratch_bytes(const struct nnb_qconv *layer) {
    struct sizes s;
    if (!layer_sizes(layer, &s)) return -EINVAL;
    return (int64_t)sizeof(int16_t) * MR * s.k_even;
}

/* The packed layer's parts (see nnb_qconv_packed_bytes). */
struct packed_view {
    const int32_t *bias, *multiplier, *left, *right, *right_mask;
    const int16_t *weights; /* tile t at weights + t * k_even * NR */
    int any_left;           /* whether any channel shifts left (most never do) */
};

static struct packed_view view_of(const void *packed, const struct sizes *s) {
    const int32_t *p = packed;
    const int64_t n = s->n_padded;
    struct packed_view v = {p, p + n, p + 2 * n, p + 3 * n, p + 4 * n,
                            (const int16_t *)(p + PARAMS * n), 0};
    for (int64_t i = 0; i < n; i++) v.any_left |= v.left[i] != 0;
    return v;
}

int nnb_qconv_pack(const struct nnb_qconv *layer, const int32_t *weights, const int32_t *bias,
                   const int32_t *multipliers, const int32_t *shifts, int per_channel,
                   void *packed, int64_t packed_bytes) {
    struct sizes s;
    if (!layer_sizes(layer, &s) || weights == NULL || bias == NULL || multipliers == NULL ||
        shifts == NULL || packed == NULL || (uintptr_t)packed % sizeof(int32_t) ||
        packed_bytes != nnb_qconv_packed_bytes(layer))
        return -EINVAL;
    const int64_t n = layer->out_c, np = s.n_padded;
    for (int64_t o = 0; o < n; o++) {
        const int64_t j = per_channel ? o : 0;
        if (multipliers[j] < 0 || shifts[j] < -31 || shifts[j] > 30) return -ERANGE;
        /* the largest |sum + bias|: |x - zero point| is at most 255 */
        int64_t bound = bias[o] < 0 ? -(int64_t)bias[o] : bias[o];
        for (int64_t k = 0; k < s.k; k++) {
            const int32_t w = weights[k * n + o];
            if (w < INT16_MIN || w > INT16_MAX) return -ERANGE;
            bound += 255 * (int64_t)(w < 0 ? -w : w);
        }
        if (bound > INT32_MAX) return -ERANGE;
    }
    memset(packed, 0, (size_t)packed_bytes);
    int32_t *p = packed;
    int32_t *b = p, *m = p + np, *left = p + 2 * np, *right = p + 3 * np, *mask = p + 4 * np;
    int16_t *w = (int16_t *)(p + PARAMS * np);
    for (int64_t o = 0; o < np; o++) {
        /* channels past out_c: zero weights and multiplier, never stored */
        const int64_t j = o >= n ? -1 : per_channel ? o : 0;
        b[o] = j < 0 ? 0 : bias[o];
        m[o] = j < 0 ? 0 : multipliers[j];
        left[o] = j < 0 || shifts[j] < 0 ? 0 : shifts[j];
        right[o] = j < 0 || shifts[j] > 0 ? 0 : -shifts[j];
        mask[o] = (int32_t)(((int64_t)1 << right[o]) - 1);
    }
    for (int64_t o = 0; o < n; o++) {
        int16_t *tile = w + (o / NR) * s.k_even * NR;
        for (int64_t k = 0; k < s.k; k++)
            tile[(k / 2) * NR * 2 + (o % NR) * 2 + (k % 2)] = (int16_t)weights[k * n + o];
    }
    return 0;
}

/* NNAPI's MultiplyByQuantizedMultiplier on an int32 total, as
 * common.multiply_by_quantized_multiplier computes it: total * 2^left
 * saturated to int32, gemmlowp's SaturatingRoundingDoublingHighMul with a
 * multiplier in [0, 2^31) (so never its INT32_MIN * INT32_MIN case), then a
 * right shift rounding half away from zero. */
static inline int32_t requantized(int32_t total, int32_t multiplier, int32_t left, int32_t right,
                                  int32_t mask) {
    int64_t x = (int64_t)total * ((int64_t)1 << left);
    x = x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : x;
    const int64_t ab = x * multiplier;
    const int64_t nudged = ab + (ab >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30));
    const int32_t high = (int32_t)((nudged + (nudged < 0 ? ((int64_t)1 << 31) - 1 : 0)) >> 31);
    const int32_t threshold = (mask >> 1) + (high < 0);
    return (high >> right) + ((high & mask) > threshold);
}

/* d[0..run) = src[0..run) as int16 minus the zero point.  A path may write
 * up to 16 elements past run, and read 16 bytes from src, where `room`
 * says both stay inside their buffers: a window's runs are short (3x3x3:
 * 9 bytes), and a loop of 9 scalar steps cost more than the tile's sums. */
typedef void widen_fn(const uint8_t *src, int16_t *d, int64_t run, int16_t zero_point,
                      int is_signed, int room);

static inline __attribute__((always_inline)) void widen_portable(const uint8_t *restrict src,
                                                                 int16_t *restrict d,
                                                                 int64_t run, int16_t zero_point,
                                                                 int is_signed, int room) {
    (void)room;
    if (is_signed)
        for (int64_t ch = 0; ch < run; ch++) d[ch] = (int16_t)((int8_t)src[ch] - zero_point);
    else
        for (int64_t ch = 0; ch < run; ch++) d[ch] = (int16_t)(src[ch] - zero_point);
}

/* The row of output pixel (b, y, x): its window
 * as int16 x - zero point, taps outside the input 0, padded with 0 to
 * k_even.  Inlined into each path's loop, so that the copy is vectorised
 * for that path's machine. */
static inline __attribute__((always_inline)) void window_row(const struct nnb_qconv *c,
                                                             const struct sizes *s,
                                                             const uint8_t *in, int64_t b,
                                                             int64_t y, int64_t x,
                                                             int16_t *restrict row,
                                                             const uint8_t *in_end,
                                                             const int16_t *row_end,
                                                             widen_fn *widen) {
    const int64_t in_c = c->in_c;
    const uint8_t *image = in + b * c->in_h * c->in_w * in_c;
    const int16_t zero_point = (int16_t)c->input_zero_point;
    const int is_signed = c->input_type == NNB_QCONV_INT8;
    int16_t *d = row;
    const int64_t x0 = x * c->stride_w - c->pad_left;
    const int64_t x_last = x0 + (c->filter_w - 1) * c->dilation_w;
    /* a window row wholly inside the input, taps adjacent: one run of bytes */
    const int whole_rows = x0 >= 0 && x_last < c->in_w && c->dilation_w == 1;
    for (int64_t i = 0; i < c->filter_h; i++) {
        const int64_t iy = y * c->stride_h + i * c->dilation_h - c->pad_top;
        if (iy < 0 || iy >= c->in_h) {
            memset(d, 0, sizeof(int16_t) * (size_t)(c->filter_w * in_c));
            d += c->filter_w * in_c;
            continue;
        }
        const int64_t runs = whole_rows ? 1 : c->filter_w;
        const int64_t run = whole_rows ? c->filter_w * in_c : in_c;
        for (int64_t j = 0; j < runs; j++, d += run) {
            const int64_t ix = x0 + j * c->dilation_w;
            if (ix < 0 || ix >= c->in_w) {
                memset(d, 0, sizeof(int16_t) * (size_t)run);
                continue;
            }
            const uint8_t *restrict src = image + (iy * c->in_w + ix) * in_c;
            const int room = src + run + 16 <= in_end && d + run + 16 <= row_end;
            widen(src, d, run, zero_point, is_signed, room);
        }
    }
    if (s->k_even > s->k) row[s->k] = 0;
}

/* One tile on the portable path: rows[MR] (rows past `rows_used` repeat the
 * last), 16 channels from tile t, `channels` of them stored. */
static void tile_portable(const int16_t *const *rows, int rows_used, const struct sizes *s,
                          const struct packed_view *v, int64_t t, const struct nnb_qconv *c,
                          uint8_t *out, int64_t out_stride, int64_t channels) {
    const int16_t *w = v->weights + t * s->k_even * NR;
    const int64_t base = t * NR;
    for (int m = 0; m < rows_used; m++) {
        int32_t acc[NR] = {0};
        for (int64_t k = 0; k < s->k_even / 2; k++) {
            const int32_t a0 = rows[m][2 * k], a1 = rows[m][2 * k + 1];
            const int16_t *wk = w + k * NR * 2;
            for (int o = 0; o < NR; o++) acc[o] += a0 * wk[2 * o] + a1 * wk[2 * o + 1];
        }
        for (int64_t o = 0; o < channels; o++) {
            const int64_t q = base + o;
            int32_t r = requantized(acc[o] + v->bias[q], v->multiplier[q], v->left[q],
                                    v->right[q], v->right_mask[q]);
            r += c->output_zero_point;
            r = r < c->lo ? c->lo : r > c->hi ? c->hi : r;
            if (c->output_type == NNB_QCONV_INT16) {
                const int16_t word = (int16_t)r;
                memcpy(out + m * out_stride + 2 * o, &word, sizeof word);
            } else {
                out[m * out_stride + o] = (uint8_t)r; /* int8 or uint8: the same byte */
            }
        }
    }
}

#ifdef QCONV_X86
/* requantized() on 8 lanes.  The 64-bit products come from pmuldq on the
 * even lanes and on the odd lanes shifted down; the truncating division by
 * 2^31 needs only the low 32 bits of the quotient, which a logical shift
 * gives as well as an arithmetic one (AVX2 has no 64-bit arithmetic shift). */
TARGET_AVX2 static inline __m256i requantized_avx2(__m256i total, const int32_t *multiplier,
                                                   const int32_t *left, const int32_t *right,
                                                   const int32_t *mask, int any_left) {
    const __m256i m = _mm256_loadu_si256((const __m256i *)multiplier);
    const __m256i l = _mm256_loadu_si256((const __m256i *)left);
    const __m256i r = _mm256_loadu_si256((const __m256i *)right);
    const __m256i rmask = _mm256_loadu_si256((const __m256i *)mask);
    /* saturating left shift: where shifting back does not restore the
     * total, the shift overflowed; saturate toward the total's sign */
    __m256i x = total;
    if (any_left) {
        const __m256i shifted = _mm256_sllv_epi32(total, l);
        const __m256i overflow =
            _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_srav_epi32(shifted, l), total),
                             _mm256_set1_epi32(-1));
        const __m256i saturated =
            _mm256_xor_si256(_mm256_set1_epi32(INT32_MAX), _mm256_srai_epi32(total, 31));
        x = _mm256_blendv_epi8(shifted, saturated, overflow);
    }
    /* SaturatingRoundingDoublingHighMul, even and odd lanes */
    const __m256i zero = _mm256_setzero_si256();
    const __m256i nudge_pos = _mm256_set1_epi64x((int64_t)1 << 30);
    const __m256i nudge_neg = _mm256_set1_epi64x(1 - ((int64_t)1 << 30));
    const __m256i round_up = _mm256_set1_epi64x(((int64_t)1 << 31) - 1);
    __m256i half[2];
    for (int odd = 0; odd < 2; odd++) {
        const __m256i xs = odd ? _mm256_srli_epi64(x, 32) : x;
        const __m256i ms = odd ? _mm256_srli_epi64(m, 32) : m;
        const __m256i ab = _mm256_mul_epi32(xs, ms);
        const __m256i negative = _mm256_cmpgt_epi64(zero, ab);
        __m256i nudged = _mm256_add_epi64(ab, _mm256_blendv_epi8(nudge_pos, nudge_neg, negative));
        nudged = _mm256_add_epi64(
            nudged, _mm256_and_si256(_mm256_cmpgt_epi64(zero, nudged), round_up));
        half[odd] = _mm256_srli_epi64(nudged, 31);
    }
    const __m256i high = _mm256_blend_epi32(half[0], _mm256_slli_epi64(half[1], 32), 0xAA);
    /* RoundingDivideByPOT */
    const __m256i threshold =
        _mm256_add_epi32(_mm256_srli_epi32(rmask, 1), _mm256_srli_epi32(high, 31));
    const __m256i up = _mm256_cmpgt_epi32(_mm256_and_si256(high, rmask), threshold);
    return _mm256_sub_epi32(_mm256_srav_epi32(high, r), up); /* up is -1 where true */
}

/* A row's pair of values k times both weight vectors, added to its sums. */
TARGET_AVX2 static inline __attribute__((always_inline)) void row_pair(const int16_t *row,
                                                                      int64_t k, __m256i w0,
                                                                      __m256i w1, __m256i *sum0,
                                                                      __m256i *sum1) {
    int32_t pair; /* two int16 row values */
    memcpy(&pair, row + 2 * k, sizeof pair);
    const __m256i b = _mm256_set1_epi32(pair);
    *sum0 = _mm256_add_epi32(*sum0, _mm256_madd_epi16(b, w0));
    *sum1 = _mm256_add_epi32(*sum1, _mm256_madd_epi16(b, w1));
}

/* widen_portable with 16 elements a step, the last step a whole one too
 * where there is room (else the rest one by one). */
TARGET_AVX2 static inline __attribute__((always_inline)) void
widen_avx2(const uint8_t *restrict src, int16_t *restrict d, int64_t run, int16_t zero_point,
           int is_signed, int room) {
    const __m256i zp = _mm256_set1_epi16(zero_point);
    int64_t ch = 0;
    const int64_t whole = room ? run : run - 15;
    for (; ch < whole; ch += 16) {
        const __m128i bytes = _mm_loadu_si128((const __m128i *)(src + ch));
        const __m256i words =
            is_signed ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes);
        _mm256_storeu_si256((__m256i *)(d + ch), _mm256_sub_epi16(words, zp));
    }
    widen_portable(src + ch, d + ch, run - ch, zero_point, is_signed, 0);
}

/* One tile on the AVX2 path for exactly `rows` (a constant where it is
 * inlined) output pixels, so that a layer of fewer pixels than MR (a fully
 * connected layer, a streaming model's one-pixel convolutions) sums only
 * the rows it stores: an unused row costs as much as a used one. */
TARGET_AVX2 static inline __attribute__((always_inline)) void
tile_avx2_rows(const int16_t *const *rows, const int n_rows, const struct sizes *s,
               const struct packed_view *v, int64_t t, const struct nnb_qconv *c, uint8_t *out,
               int64_t out_stride, int64_t channels) {
    const int16_t *w = v->weights + t * s->k_even * NR;
    /* named sums, not an array: gcc keeps an array's vectors on the stack */
    const int16_t *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3], *r4 = rows[4],
                  *r5 = rows[5];
    __m256i a00 = _mm256_setzero_si256(), a01 = a00, a10 = a00, a11 = a00;
    __m256i a20 = a00, a21 = a00, a30 = a00, a31 = a00;
    __m256i a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    const int64_t pairs = s->k_even / 2;
    for (int64_t k = 0; k < pairs; k++) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(w + k * NR * 2));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(w + k * NR * 2 + 16));
        row_pair(r0, k, w0, w1, &a00, &a01);
        if (n_rows > 1) row_pair(r1, k, w0, w1, &a10, &a11);
        if (n_rows > 2) row_pair(r2, k, w0, w1, &a20, &a21);
        if (n_rows > 3) row_pair(r3, k, w0, w1, &a30, &a31);
        if (n_rows > 4) row_pair(r4, k, w0, w1, &a40, &a41);
        if (n_rows > 5) row_pair(r5, k, w0, w1, &a50, &a51);
    }
    const __m256i acc[MR][2] = {{a00, a01}, {a10, a11}, {a20, a21},
                                {a30, a31}, {a40, a41}, {a50, a51}};
    const int64_t q = t * NR;
    const __m256i zero_point = _mm256_set1_epi32(c->output_zero_point);
    const __m256i lo = _mm256_set1_epi32(c->lo), hi = _mm256_set1_epi32(c->hi);
    const int is_signed = c->output_type == NNB_QCONV_INT8;
    const int is_int16 = c->output_type == NNB_QCONV_INT16;
#pragma GCC unroll 6
    for (int m = 0; m < n_rows; m++) {
        __m256i half[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int h = 0; h < (channels > 8 ? 2 : 1); h++) { /* the second half if stored */
            const int64_t e = q + 8 * h;
            const __m256i total = _mm256_add_epi32(
                acc[m][h], _mm256_loadu_si256((const __m256i *)(v->bias + e)));
            __m256i r = requantized_avx2(total, v->multiplier + e, v->left + e, v->right + e,
                                         v->right_mask + e, v->any_left);
            r = _mm256_add_epi32(r, zero_point);
            half[h] = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
        }
        /* 16 int32 in [lo, hi] -> 16 int16 (or bytes) in channel order */
        const __m256i words =
            _mm256_permute4x64_epi64(_mm256_packs_epi32(half[0], half[1]), 0xD8);
        if (is_int16) {
            if (channels == NR) {
                _mm256_storeu_si256((__m256i *)(out + m * out_stride), words);
            } else {
                int16_t tmp[NR];
                _mm256_storeu_si256((__m256i *)tmp, words);
                memcpy(out + m * out_stride, tmp, sizeof(int16_t) * (size_t)channels);
            }
            continue;
        }
        const __m128i w_lo = _mm256_castsi256_si128(words);
        const __m128i w_hi = _mm256_extracti128_si256(words, 1);
        const __m128i bytes =
            is_signed ? _mm_packs_epi16(w_lo, w_hi) : _mm_packus_epi16(w_lo, w_hi);
        if (channels == NR) {
            _mm_storeu_si128((__m128i *)(out + m * out_stride), bytes);
        } else {
            uint8_t tmp[NR];
            _mm_storeu_si128((__m128i *)tmp, bytes);
            memcpy(out + m * out_stride, tmp, (size_t)channels);
        }
    }
}

/* One tile on the AVX2 path, as tile_portable: the instance for its rows. */
TARGET_AVX2 static void tile_avx2(const int16_t *const *rows, int rows_used,
                                  const struct sizes *s, const struct packed_view *v, int64_t t,
                                  const struct nnb_qconv *c, uint8_t *out, int64_t out_stride,
                                  int64_t channels) {
    switch (rows_used) {
    case 1: tile_avx2_rows(rows, 1, s, v, t, c, out, out_stride, channels); break;
    case 2: tile_avx2_rows(rows, 2, s, v, t, c, out, out_stride, channels); break;
    case 3: tile_avx2_rows(rows, 3, s, v, t, c, out, out_stride, channels); break;
    case 4: tile_avx2_rows(rows, 4, s, v, t, c, out, out_stride, channels); break;
    case 5: tile_avx2_rows(rows, 5, s, v, t, c, out, out_stride, channels); break;
    default: tile_avx2_rows(rows, MR, s, v, t, c, out, out_stride, channels); break;
    }
}
#endif

typedef void tile_fn(const int16_t *const *rows, int rows_used, const struct sizes *s,
                     const struct packed_view *v, int64_t t, const struct nnb_qconv *c,
                     uint8_t *out, int64_t out_stride, int64_t channels);

/* Every output pixel, MR at a time: their window rows, then each tile.
 * Inlined per path so that window_row is built for its machine. */
static inline __attribute__((always_inline)) void run_layer(const struct nnb_qconv *c,
                                                            const struct sizes *s,
                                                            const struct packed_view *v,
                                                            const uint8_t *in, int64_t pixels,
                                                            uint8_t *out, int16_t *scratch,
                                                            tile_fn *tile, widen_fn *widen) {
    const uint8_t *in_end = in + pixels / (c->out_h * c->out_w) * c->in_h * c->in_w * c->in_c;
    const int16_t *scratch_end = scratch + MR * s->k_even;
    const int64_t tiles = s->n_padded / NR;
    const int64_t out_bytes = c->output_type == NNB_QCONV_INT16 ? 2 : 1; /* an element's */
    /* A pointwise layer (1x1, stride 1, no padding, the input's size, even
     * in_c): the window rows of the MR pixels are the MR input pixels
     * themselves, one run of bytes widened in one loop, no window to walk. */
    const int pointwise = c->filter_h == 1 && c->filter_w == 1 && c->stride_h == 1 &&
                          c->stride_w == 1 && c->pad_top == 0 && c->pad_left == 0 &&
                          c->out_h == c->in_h && c->out_w == c->in_w && s->k == s->k_even;
    const int is_signed = c->input_type == NNB_QCONV_INT8;
    const int16_t zero_point = (int16_t)c->input_zero_point;
    int64_t b = 0, y = 0, x = 0; /* the next pixel's, counted (no division a pixel) */
    for (int64_t p = 0; p < pixels; p += MR) {
        const int used = pixels - p < MR ? (int)(pixels - p) : MR;
        const int16_t *rows[MR];
        if (pointwise) {
            const uint8_t *restrict src = in + p * s->k;
            int16_t *restrict d = scratch;
            const int64_t n = used * s->k;
            if (is_signed)
                for (int64_t q = 0; q < n; q++) d[q] = (int16_t)((int8_t)src[q] - zero_point);
            else
                for (int64_t q = 0; q < n; q++) d[q] = (int16_t)(src[q] - zero_point);
        }
        for (int m = 0; m < MR; m++) {
            rows[m] = scratch + (m < used ? m : used - 1) * s->k_even;
            if (m >= used || pointwise) continue;
            window_row(c, s, in, b, y, x, scratch + m * s->k_even, in_end, scratch_end, widen);
            if (++x == c->out_w) {
                x = 0;
                if (++y == c->out_h) y = 0, b++;
            }
        }
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t channels = c->out_c - t * NR < NR ? c->out_c - t * NR : NR;
            tile(rows, used, s, v, t, c, out + (p * c->out_c + t * NR) * out_bytes,
                 c->out_c * out_bytes, channels);
        }
    }
}

static void run_portable(const struct nnb_qconv *c, const struct sizes *s,
                         const struct packed_view *v, const uint8_t *in, int64_t pixels,
                         uint8_t *out, int16_t *scratch) {
    run_layer(c, s, v, in, pixels, out, scratch, tile_portable, widen_portable);
}

#ifdef QCONV_X86
TARGET_AVX2 static void run_avx2(const struct nnb_qconv *c, const struct sizes *s,
                                 const struct packed_view *v, const uint8_t *in, int64_t pixels,
                                 uint8_t *out, int16_t *scratch) {
    run_layer(c, s, v, in, pixels, out, scratch, tile_avx2, widen_avx2);
}
#endif

int nnb_qconv_path(int path) {
#ifdef QCONV_X86
    const int avx2 = __builtin_cpu_supports("avx2");
#else
    const int avx2 = 0;
#endif
    if (path == NNB_QCONV_BEST) return avx2 ? NNB_QCONV_AVX2 : NNB_QCONV_PORTABLE;
    if (path == NNB_QCONV_PORTABLE || (path == NNB_QCONV_AVX2 && avx2)) return path;
    return -ENOTSUP;
}

int nnb_qconv_run(const struct nnb_qconv *layer, const void *packed, int64_t packed_bytes,
                  const void *in, int64_t batches, void *out, void *scratch,
                  int64_t scratch_bytes, int path) {
    struct sizes s;
    if (!layer_sizes(layer, &s) || packed == NULL || in == NULL || out == NULL ||
        scratch == NULL || (uintptr_t)packed % sizeof(int32_t) ||
        (uintptr_t)scratch % sizeof(int16_t) || packed_bytes != nnb_qconv_packed_bytes(layer) ||
        scratch_bytes < nnb_qconv_scratch_bytes(layer) || batches < 0 ||
        (batches > 0 && batches > LIMIT / (layer->in_h * layer->in_w * layer->in_c)) ||
        (batches > 0 && batches > LIMIT / (layer->out_h * layer->out_w * layer->out_c)))
        return -EINVAL;
    const int chosen = nnb_qconv_path(path);
    if (chosen < 0) return chosen;
    const struct packed_view v = view_of(packed, &s);
    const int64_t pixels = batches * layer->out_h * layer->out_w;
#ifdef QCONV_X86
    if (chosen == NNB_QCONV_AVX2) {
        run_avx2(layer, &s, &v, in, pixels, out, scratch);
        return 0;
    }
#endif
    run_portable(layer, &s, &v, in, pixels, out, scratch);
    return 0;
}

/* Depthwise convolution (depth multiplier 1): every output channel sums
 * its own input channel over the window's taps, so there is no row to
 * share across channels; a 16-channel tile of one output pixel sums its
 * taps two at a time instead.  Two taps' 16 input bytes are widened to
 * int16 (x - zero point), interleaved channel by channel (punpcklwd and
 * punpckhwd, which work within 128-bit lanes: channels 0-3 and 8-11 in
 * one vector, 4-7 and 12-15 in the other) and multiplied with the two
 * taps' weights packed in that order by one pmaddwd each.  The parameters
 * are packed in the same order, and packssdw of the two halves puts the
 * channels back in order.  An odd last tap pairs with zero weights. */

/* The lane order of a tile: position p holds channel LANE[p]. */
static const int LANE[NR] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};

struct dw_sizes {
    int64_t taps, pairs, n_padded;
    /* during a run: the zero-point pixel and the end of the input, so that a
     * tail tile loads 16 bytes wherever they lie inside one of the two */
    const uint8_t *zero_points;
    uintptr_t in_end;
};

static int dw_sizes(const struct nnb_qconv *c, struct dw_sizes *d) {
    struct sizes s;
    if (!layer_sizes(c, &s) || c->in_c != c->out_c || c->output_type == NNB_QCONV_INT16)
        return 0;
    d->taps = c->filter_h * c->filter_w;
    d->pairs = (d->taps + 1) / 2;
    d->n_padded = s.n_padded;
    return 1;
}

int64_t nnb_qdwconv_packed_bytes(const struct nnb_qconv *layer) {
    struct dw_sizes d;
    if (!dw_sizes(layer, &d)) return -EINVAL;
    /* the parameter arrays in lane order, then int16 weights
     * [Np/NR][pairs][NR lanes][2 taps] */
    return (int64_t)sizeof(int32_t) * PARAMS * d.n_padded +
           (int64_t)sizeof(int16_t) * d.n_padded * d.pairs * 2;
}

int64_t nnb_qdwconv_scratch_bytes(const struct nnb_qconv *layer) {
    struct dw_sizes d;
    if (!dw_sizes(layer, &d)) return -EINVAL;
    return d.n_padded; /* a pixel of zero points, the taps outside the input */
}

int nnb_qdwconv_pack(const struct nnb_qconv *layer, const int32_t *weights, const int32_t *bias,
                     const int32_t *multipliers, const int32_t *shifts, int per_channel,
                     void *packed, int64_t packed_bytes) {
    struct dw_sizes d;
    if (!dw_sizes(layer, &d) || weights == NULL || bias == NULL || multipliers == NULL ||
        shifts == NULL || packed == NULL || (uintptr_t)packed % sizeof(int32_t) ||
        packed_bytes != nnb_qdwconv_packed_bytes(layer))
        return -EINVAL;
    const int64_t n = layer->out_c, np = d.n_padded;
    for (int64_t o = 0; o < n; o++) {
        const int64_t j = per_channel ? o : 0;
        if (multipliers[j] < 0 || shifts[j] < -31 || shifts[j] > 30) return -ERANGE;
        int64_t bound = bias[o] < 0 ? -(int64_t)bias[o] : bias[o];
        for (int64_t t = 0; t < d.taps; t++) {
            const int32_t w = weights[t * n + o];
            if (w < INT16_MIN || w > INT16_MAX) return -ERANGE;
            bound += 255 * (int64_t)(w < 0 ? -w : w);
        }
        if (bound > INT32_MAX) return -ERANGE;
    }
    memset(packed, 0, (size_t)packed_bytes);
    int32_t *p = packed;
    int16_t *w = (int16_t *)(p + PARAMS * np);
    for (int64_t e = 0; e < np; e++) {
        /* the channel at lane e; a layer of 8 channels has them twice, so
         * that a tile can sum two pixels at once (dw_pixel_pair_avx2) */
        const int64_t lane_channel = e / NR * NR + LANE[e % NR];
        const int64_t o = n == 8 && lane_channel >= 8 ? lane_channel - 8 : lane_channel;
        const int64_t j = o >= n ? -1 : per_channel ? o : 0;
        int32_t *b = p, *m = p + np, *left = p + 2 * np, *right = p + 3 * np, *mask = p + 4 * np;
        b[e] = j < 0 ? 0 : bias[o];
        m[e] = j < 0 ? 0 : multipliers[j];
        left[e] = j < 0 || shifts[j] < 0 ? 0 : shifts[j];
        right[e] = j < 0 || shifts[j] > 0 ? 0 : -shifts[j];
        mask[e] = (int32_t)(((int64_t)1 << right[e]) - 1);
        if (j < 0) continue;
        int16_t *tile = w + (e / NR) * d.pairs * NR * 2;
        for (int64_t t = 0; t < d.taps; t++)
            tile[(t / 2) * NR * 2 + (e % NR) * 2 + t % 2] = (int16_t)weights[t * n + o];
    }
    return 0;
}

static void dw_pixel_portable(const struct nnb_qconv *c, const struct dw_sizes *d,
                              const struct packed_view *v, const uint8_t *const *pixels,
                              uint8_t *out) {
    const int is_signed = c->input_type == NNB_QCONV_INT8;
    for (int64_t e = 0; e < c->out_c / NR * NR + (c->out_c % NR ? NR : 0); e++) {
        const int64_t o = e / NR * NR + LANE[e % NR];
        if (o >= c->out_c) continue;
        const int16_t *w = v->weights + (e / NR) * d->pairs * NR * 2 + (e % NR) * 2;
        int32_t acc = 0;
        for (int64_t t = 0; t < d->taps; t++) {
            const uint8_t byte = pixels[t][o];
            const int32_t x = (is_signed ? (int8_t)byte : byte) - c->input_zero_point;
            acc += x * w[(t / 2) * NR * 2 + t % 2];
        }
        int32_t r = requantized(acc + v->bias[e], v->multiplier[e], v->left[e], v->right[e],
                                v->right_mask[e]);
        r += c->output_zero_point;
        out[o] = (uint8_t)(r < c->lo ? c->lo : r > c->hi ? c->hi : r);
    }
}

#ifdef QCONV_X86
/* 16 bytes from `at`, where `channels` of them are wanted: in place when all
 * 16 lie inside the input or the zero-point pixel, else a copy of the
 * wanted ones in `copy`. */
static inline const uint8_t *tail_bytes(const struct dw_sizes *d, const uint8_t *at,
                                        int64_t channels, uint8_t *copy) {
    const uintptr_t start = (uintptr_t)d->zero_points, from = (uintptr_t)at;
    if ((from >= start && from + NR <= start + (uintptr_t)d->n_padded) || from + NR <= d->in_end)
        return at;
    memcpy(copy, at, (size_t)channels);
    return copy;
}

/* 16 bytes of channels from `at` as int16 minus the zero point. */
TARGET_AVX2 static inline __m256i widened(const uint8_t *at, int is_signed, __m256i zero_point) {
    const __m128i bytes = _mm_loadu_si128((const __m128i *)at);
    const __m256i words = is_signed ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes);
    return _mm256_sub_epi16(words, zero_point);
}

/* A depthwise tile's 16 sums (acc_lo, acc_hi: the lanes the unpacked tap
 * pairs leave, [0-3 8-11] and [4-7 12-15]) with the bias, parameters and
 * clamp of channels first.., requantized to 16 bytes in channel order
 * (packssdw puts the lanes back in order). */
TARGET_AVX2 static inline __attribute__((always_inline)) __m128i
dw_requantized_avx2(const struct nnb_qconv *c, const struct packed_view *v, int64_t first,
                    __m256i acc_lo, __m256i acc_hi) {
    const __m256i out_zero_point = _mm256_set1_epi32(c->output_zero_point);
    const __m256i lo = _mm256_set1_epi32(c->lo), hi = _mm256_set1_epi32(c->hi);
    const __m256i acc[2] = {acc_lo, acc_hi};
    __m256i half[2];
    for (int h = 0; h < 2; h++) {
        const int64_t e = first + 8 * h;
        const __m256i total =
            _mm256_add_epi32(acc[h], _mm256_loadu_si256((const __m256i *)(v->bias + e)));
        __m256i r = requantized_avx2(total, v->multiplier + e, v->left + e, v->right + e,
                                     v->right_mask + e, v->any_left);
        r = _mm256_add_epi32(r, out_zero_point);
        half[h] = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
    }
    const __m256i words = _mm256_packs_epi32(half[0], half[1]);
    const __m128i w_lo = _mm256_castsi256_si128(words);
    const __m128i w_hi = _mm256_extracti128_si256(words, 1);
    return c->output_type == NNB_QCONV_INT8 ? _mm_packs_epi16(w_lo, w_hi)
                                            : _mm_packus_epi16(w_lo, w_hi);
}

/* dw_pixel_avx2's body for one input type (is_signed a constant where it
 * is inlined, so that the widening is no branch in the tap loop). */
TARGET_AVX2 static inline __attribute__((always_inline)) void
dw_pixel_avx2_typed(const struct nnb_qconv *c, const struct dw_sizes *d,
                    const struct packed_view *v, const uint8_t *const *pixels, uint8_t *out,
                    const int is_signed) {
    const __m256i zero_point = _mm256_set1_epi16((int16_t)c->input_zero_point);
    const int64_t tiles = d->n_padded / NR;
    for (int64_t tile = 0; tile < tiles; tile++) {
        const int64_t first = tile * NR;
        const int64_t channels = c->out_c - first < NR ? c->out_c - first : NR;
        const int16_t *w = v->weights + tile * d->pairs * NR * 2;
        __m256i acc_lo = _mm256_setzero_si256(), acc_hi = acc_lo;
        uint8_t tail[2][NR];
        for (int64_t pair = 0; pair < d->pairs; pair++) {
            const int64_t t0 = 2 * pair, t1 = t0 + 1 < d->taps ? t0 + 1 : t0;
            __m256i x0, x1;
            if (channels == NR) {
                x0 = widened(pixels[t0] + first, is_signed, zero_point);
                x1 = widened(pixels[t1] + first, is_signed, zero_point);
            } else { /* the last channels: lanes past them meet zero weights */
                x0 = widened(tail_bytes(d, pixels[t0] + first, channels, tail[0]), is_signed,
                             zero_point);
                x1 = widened(tail_bytes(d, pixels[t1] + first, channels, tail[1]), is_signed,
                             zero_point);
            }
            const __m256i w_lo = _mm256_loadu_si256((const __m256i *)(w + pair * NR * 2));
            const __m256i w_hi = _mm256_loadu_si256((const __m256i *)(w + pair * NR * 2 + 16));
            const __m256i pairs_lo = _mm256_unpacklo_epi16(x0, x1);
            const __m256i pairs_hi = _mm256_unpackhi_epi16(x0, x1);
            acc_lo = _mm256_add_epi32(acc_lo, _mm256_madd_epi16(pairs_lo, w_lo));
            acc_hi = _mm256_add_epi32(acc_hi, _mm256_madd_epi16(pairs_hi, w_hi));
        }
        const __m128i bytes = dw_requantized_avx2(c, v, first, acc_lo, acc_hi);
        if (channels == NR) {
            _mm_storeu_si128((__m128i *)(out + first), bytes);
        } else {
            uint8_t tmp[NR];
            _mm_storeu_si128((__m128i *)tmp, bytes);
            memcpy(out + first, tmp, (size_t)channels);
        }
    }
}

TARGET_AVX2 static inline __attribute__((always_inline)) void
dw_pixel_avx2_int8(const struct nnb_qconv *c, const struct dw_sizes *d,
                   const struct packed_view *v, const uint8_t *const *pixels, uint8_t *out) {
    dw_pixel_avx2_typed(c, d, v, pixels, out, 1);
}

TARGET_AVX2 static inline __attribute__((always_inline)) void
dw_pixel_avx2_uint8(const struct nnb_qconv *c, const struct dw_sizes *d,
                    const struct packed_view *v, const uint8_t *const *pixels, uint8_t *out) {
    dw_pixel_avx2_typed(c, d, v, pixels, out, 0);
}
#endif

#ifdef QCONV_X86
/* Two output pixels of a layer of 8 channels in one tile: pixel a's
 * channels in lanes 0-7, b's in 8-15 (the packed tile has the 8 channels'
 * weights and parameters twice), stored as 16 bytes at out: a and b are
 * adjacent pixels of an output row. */
TARGET_AVX2 static inline __attribute__((always_inline)) void
dw_pixel_pair_avx2(const struct nnb_qconv *c, const struct dw_sizes *d,
                   const struct packed_view *v, const uint8_t *const *a,
                   const uint8_t *const *b, uint8_t *out, const int is_signed) {
    const __m256i zero_point = _mm256_set1_epi16((int16_t)c->input_zero_point);
    const int16_t *w = v->weights;
    __m256i acc_lo = _mm256_setzero_si256(), acc_hi = acc_lo;
    for (int64_t pair = 0; pair < d->pairs; pair++) {
        const int64_t t0 = 2 * pair, t1 = t0 + 1 < d->taps ? t0 + 1 : t0;
        const __m128i bytes0 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)a[t0]),
                                                  _mm_loadl_epi64((const __m128i *)b[t0]));
        const __m128i bytes1 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)a[t1]),
                                                  _mm_loadl_epi64((const __m128i *)b[t1]));
        const __m256i x0 = _mm256_sub_epi16(
            is_signed ? _mm256_cvtepi8_epi16(bytes0) : _mm256_cvtepu8_epi16(bytes0), zero_point);
        const __m256i x1 = _mm256_sub_epi16(
            is_signed ? _mm256_cvtepi8_epi16(bytes1) : _mm256_cvtepu8_epi16(bytes1), zero_point);
        const __m256i w_lo = _mm256_loadu_si256((const __m256i *)(w + pair * NR * 2));
        const __m256i w_hi = _mm256_loadu_si256((const __m256i *)(w + pair * NR * 2 + 16));
        acc_lo = _mm256_add_epi32(acc_lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1), w_lo));
        acc_hi = _mm256_add_epi32(acc_hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1), w_hi));
    }
    _mm_storeu_si128((__m128i *)out, dw_requantized_avx2(c, v, 0, acc_lo, acc_hi));
}
#endif

typedef void dw_pixel_fn(const struct nnb_qconv *c, const struct dw_sizes *d,
                         const struct packed_view *v, const uint8_t *const *pixels,
                         uint8_t *out);

/* Most taps a window may have on the stack's list of tap pixels; a larger
 * window is refused (-EINVAL) by nnb_qdwconv_run. */
#define DW_MAX_TAPS 256

/* Every output pixel: its taps' input pixels (or the zero-point pixel
 * outside the input), then `pixel` on them.  Inlined into each path with its
 * pixel function, so that the pixel's code is inlined too and its constants
 * are set once a layer, not once a pixel.  The input rows of an output row
 * are found once a row. */
typedef void dw_pair_fn(const struct nnb_qconv *c, const struct dw_sizes *d,
                        const struct packed_view *v, const uint8_t *const *a,
                        const uint8_t *const *b, uint8_t *out);

/* The taps of output pixel x of a row whose filter rows start at rows[]. */
static inline __attribute__((always_inline)) void dw_taps(const struct nnb_qconv *c,
                                                          const struct dw_sizes *d,
                                                          const uint8_t *const *rows, int64_t x,
                                                          const uint8_t **tap) {
    const int64_t x0 = x * c->stride_w - c->pad_left;
    for (int64_t i = 0; i < c->filter_h; i++)
        for (int64_t j = 0; j < c->filter_w; j++) {
            const int64_t ix = x0 + j * c->dilation_w;
            *tap++ = rows[i] == NULL || ix < 0 || ix >= c->in_w ? d->zero_points
                                                                : rows[i] + ix * c->in_c;
        }
}

static inline __attribute__((always_inline)) void dw_loops(const struct nnb_qconv *c,
                                                           const struct dw_sizes *d,
                                                           const struct packed_view *v,
                                                           const uint8_t *in, int64_t batches,
                                                           uint8_t *out, dw_pixel_fn *pixel,
                                                           dw_pair_fn *pair) {
    const uint8_t *pixels[DW_MAX_TAPS], *second[DW_MAX_TAPS];
    const uint8_t *rows[DW_MAX_TAPS]; /* filter row i's input row, or NULL outside */
    const int64_t image_bytes = c->in_h * c->in_w * c->in_c;
    uint8_t *o = out;
    for (int64_t b = 0; b < batches; b++) {
        const uint8_t *image = in + b * image_bytes;
        for (int64_t y = 0; y < c->out_h; y++) {
            for (int64_t i = 0; i < c->filter_h; i++) {
                const int64_t iy = y * c->stride_h + i * c->dilation_h - c->pad_top;
                rows[i] = iy < 0 || iy >= c->in_h ? NULL : image + iy * c->in_w * c->in_c;
            }
            int64_t x = 0;
            if (pair != NULL)
                for (; x + 1 < c->out_w; x += 2, o += 2 * c->out_c) {
                    dw_taps(c, d, rows, x, pixels);
                    dw_taps(c, d, rows, x + 1, second);
                    pair(c, d, v, pixels, second, o);
                }
            for (; x < c->out_w; x++, o += c->out_c) {
                dw_taps(c, d, rows, x, pixels);
                pixel(c, d, v, pixels, o);
            }
        }
    }
}

static void dw_run_portable(const struct nnb_qconv *c, const struct dw_sizes *d,
                            const struct packed_view *v, const uint8_t *in, int64_t batches,
                            uint8_t *out) {
    dw_loops(c, d, v, in, batches, out, dw_pixel_portable, NULL);
}

#ifdef QCONV_X86
TARGET_AVX2 static inline __attribute__((always_inline)) void
dw_pair_avx2_int8(const struct nnb_qconv *c, const struct dw_sizes *d,
                  const struct packed_view *v, const uint8_t *const *a, const uint8_t *const *b,
                  uint8_t *out) {
    dw_pixel_pair_avx2(c, d, v, a, b, out, 1);
}

TARGET_AVX2 static inline __attribute__((always_inline)) void
dw_pair_avx2_uint8(const struct nnb_qconv *c, const struct dw_sizes *d,
                   const struct packed_view *v, const uint8_t *const *a, const uint8_t *const *b,
                   uint8_t *out) {
    dw_pixel_pair_avx2(c, d, v, a, b, out, 0);
}

TARGET_AVX2 static void dw_run_avx2(const struct nnb_qconv *c, const struct dw_sizes *d,
                                    const struct packed_view *v, const uint8_t *in,
                                    int64_t batches, uint8_t *out) {
    const int is_signed = c->input_type == NNB_QCONV_INT8;
    if (c->out_c == 8 && is_signed)
        dw_loops(c, d, v, in, batches, out, dw_pixel_avx2_int8, dw_pair_avx2_int8);
    else if (c->out_c == 8)
        dw_loops(c, d, v, in, batches, out, dw_pixel_avx2_uint8, dw_pair_avx2_uint8);
    else if (is_signed)
        dw_loops(c, d, v, in, batches, out, dw_pixel_avx2_int8, NULL);
    else
        dw_loops(c, d, v, in, batches, out, dw_pixel_avx2_uint8, NULL);
}
#endif

int nnb_qdwconv_run(const struct nnb_qconv *layer, const void *packed, int64_t packed_bytes,
                    const void *in, int64_t batches, void *out, void *scratch,
                    int64_t scratch_bytes, int path) {
    struct dw_sizes d;
    if (!dw_sizes(layer, &d) || d.taps > DW_MAX_TAPS || packed == NULL || in == NULL ||
        out == NULL || scratch == NULL || (uintptr_t)packed % sizeof(int32_t) ||
        packed_bytes != nnb_qdwconv_packed_bytes(layer) ||
        scratch_bytes < nnb_qdwconv_scratch_bytes(layer) || batches < 0 ||
        (batches > 0 && batches > LIMIT / (layer->in_h * layer->in_w * layer->in_c)) ||
        (batches > 0 && batches > LIMIT / (layer->out_h * layer->out_w * layer->out_c)))
        return -EINVAL;
    const int chosen = nnb_qconv_path(path);
    if (chosen < 0) return chosen;
    struct sizes s = {0, 0, d.n_padded};
    const struct packed_view v = view_of(packed, &s);
    uint8_t *zero_points = scratch;
    memset(zero_points, (uint8_t)layer->input_zero_point, (size_t)d.n_padded);
    const int64_t image_bytes = layer->in_h * layer->in_w * layer->in_c;
    d.zero_points = zero_points;
    d.in_end = (uintptr_t)in + (uintptr_t)(batches * image_bytes);
#ifdef QCONV_X86
    if (chosen == NNB_QCONV_AVX2) {
        dw_run_avx2(layer, &d, &v, in, batches, out);
        return 0;
    }
#endif
    dw_run_portable(layer, &d, &v, in, batches, out);
    return 0;
}
