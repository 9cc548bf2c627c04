/* The convolution loops, the padded add, the requantization and the
 * quantized ADD/MUL table, SOFTMAX and QUANTIZE under ASan
 * and UBSan: random shapes, strides, dilations and paddings (including
 * windows wholly in the padding), every buffer allocated at exactly the size
 * the shape promises, on every path this CPU runs.  With all inputs and
 * weights 1 and no bias, each convolution output is the number of the
 * window's taps inside the input (times the input channels for CONV_2D): so
 * the padding is checked too, not only the bounds.  Usage: test_kernels
 * [SHAPES]. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static int64_t between(int64_t lo, int64_t hi) { return lo + rand() % (hi - lo + 1); }

static float *ones(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = 1;
    return p;
}

/* A random shape whose windows fit its padded input; 0 if the draw does not fit. */
static int random_shape(struct nnb_window_shape *s, int64_t *channels) {
    memset(s, 0, sizeof *s);
    s->batches = between(1, 2);
    s->in_h = between(1, 12);
    s->in_w = between(1, 40);
    s->filter_h = between(1, 4);
    s->filter_w = between(1, 4);
    s->stride_h = between(1, 3);
    s->stride_w = between(1, 3);
    s->dilation_h = between(1, 2);
    s->dilation_w = between(1, 2);
    s->pad_top = between(0, 4);
    s->pad_bottom = between(0, 4);
    s->pad_left = between(0, 5);
    s->pad_right = between(0, 5);
    *channels = between(1, 40);
    const int64_t high = s->in_h + s->pad_top + s->pad_bottom;
    const int64_t wide = s->in_w + s->pad_left + s->pad_right;
    const int64_t reach_h = (s->filter_h - 1) * s->dilation_h + 1;
    const int64_t reach_w = (s->filter_w - 1) * s->dilation_w + 1;
    if (high < reach_h || wide < reach_w) return 0;
    s->out_h = (high - reach_h) / s->stride_h + 1;
    s->out_w = (wide - reach_w) / s->stride_w + 1;
    return 1;
}

static int taps_inside(const struct nnb_window_shape *s, int64_t y, int64_t x) {
    int n = 0;
    for (int64_t i = 0; i < s->filter_h; i++)
        for (int64_t j = 0; j < s->filter_w; j++) {
            const int64_t in_y = y * s->stride_h - s->pad_top + i * s->dilation_h;
            const int64_t in_x = x * s->stride_w - s->pad_left + j * s->dilation_w;
            n += in_y >= 0 && in_y < s->in_h && in_x >= 0 && in_x < s->in_w;
        }
    return n;
}

static int check(const char *what, const struct nnb_window_shape *s, const float *out,
                 float per_tap) {
    for (int64_t b = 0; b < s->batches; b++)
        for (int64_t y = 0; y < s->out_h; y++)
            for (int64_t x = 0; x < s->out_w; x++)
                for (int64_t c = 0; c < s->out_c; c++) {
                    const float want = per_tap * (float)taps_inside(s, y, x);
                    const float got = out[((b * s->out_h + y) * s->out_w + x) * s->out_c + c];
                    if (got != want) {
                        fprintf(stderr, "%s: pixel (%lld, %lld) channel %lld: %g, want %g\n", what,
                                (long long)y, (long long)x, (long long)c, got, want);
                        return 1;
                    }
                }
    return 0;
}

/* a + x zero-padded to a's channels, x's values distinct so a misplaced
 * load shows; pixels * channels floats in a and out, exactly. */
static int check_padded_add(void) {
    const int64_t pixels = between(1, 9), channels = between(1, 70);
    const int64_t x_channels = between(0, channels);
    float *a = ones(pixels * channels), *out = malloc(sizeof(float) * (size_t)(pixels * channels));
    float *x = malloc(sizeof(float) * (size_t)(pixels * x_channels + 1)); /* +1: never 0 bytes */
    for (int64_t i = 0; i < pixels * x_channels; i++) x[i] = (float)(i + 1);
    int rc = nnb_add_padded_channels_f32(a, x, (uint64_t)pixels, (uint32_t)channels,
                                         (uint32_t)x_channels, -1e30f, 1e30f, out);
    for (int64_t p = 0; rc == 0 && p < pixels; p++)
        for (int64_t c = 0; c < channels; c++) {
            const float want = 1 + (c < x_channels ? x[p * x_channels + c] : 0);
            if (out[p * channels + c] != want) {
                fprintf(stderr, "padded add: pixel %lld channel %lld: %g, want %g\n",
                        (long long)p, (long long)c, out[p * channels + c], want);
                rc = 1;
                break;
            }
        }
    free(a);
    free(x);
    free(out);
    return rc;
}

/* The requantization with every buffer at its exact size, one multiplier or
 * one per channel, both output types (its values: tests/test_quant_exact.py). */
static int check_requantize(void) {
    const int64_t rows = between(1, 9), channels = between(1, 40);
    const int per_channel = (int)between(0, 1), kinds = per_channel ? (int)channels : 1;
    float *acc = ones(rows * channels);
    int64_t *bias = calloc((size_t)channels, sizeof(int64_t));
    int64_t *multipliers = malloc(sizeof(int64_t) * (size_t)kinds);
    int64_t *shifts = malloc(sizeof(int64_t) * (size_t)kinds);
    for (int k = 0; k < kinds; k++) {
        multipliers[k] = 1LL << 30; /* one half */
        shifts[k] = between(-31, 30);
    }
    int8_t *out = malloc((size_t)(rows * channels));
    const int type = between(0, 1) ? NNB_OUT_INT8 : NNB_OUT_UINT8;
    const int rc = nnb_requantize_f32(acc, (uint64_t)rows, (uint32_t)channels, bias, multipliers,
                                      shifts, per_channel, 0, 0, 127, type, out);
    free(acc);
    free(bias);
    free(multipliers);
    free(shifts);
    free(out);
    if (rc) fprintf(stderr, "requantize: %d\n", rc);
    return rc;
}

/* The quantized ADD table and its lookup: the table at exactly 65536 bytes,
 * a, b and out at exactly their counts (b repeating along a).  MUL with
 * multiplier one half and zero points 0 is a known table: a * b / 2 with
 * halves rounded up. */
static int check_quant_binary(void) {
    uint8_t *table = malloc(65536);
    struct nnb_quant_binary p = {NNB_QUANT_MUL, NNB_OUT_INT8, 0, 0, 0, 0, 0, 0, 0, 0,
                                 1 << 30, 0, -128, 127};
    int rc = nnb_quant_binary_table(&p, table);
    for (int a = -128; rc == 0 && a < 128; a++)
        for (int b = -128; b < 128; b++) {
            /* a * b / 2, a half rounded up (the high product's rule) */
            int want = (a * b + 1 + (1 << 16)) / 2 - (1 << 15);
            want = want < -128 ? -128 : want > 127 ? 127 : want;
            const int got = (int8_t)table[(uint8_t)a * 256 + (uint8_t)b];
            if (got != want) {
                fprintf(stderr, "quant mul: %d * %d / 2 = %d, want %d\n", a, b, got, want);
                rc = 1;
                break;
            }
        }
    const int64_t b_count = between(1, 20), count = b_count * between(1, 9);
    uint8_t *a = malloc((size_t)count), *b = malloc((size_t)b_count), *out = malloc((size_t)count);
    for (int64_t i = 0; i < count; i++) a[i] = (uint8_t)rand();
    for (int64_t i = 0; i < b_count; i++) b[i] = (uint8_t)rand();
    if (rc == 0) rc = nnb_quant_binary_lookup(a, (uint64_t)count, b, (uint64_t)b_count, table, out);
    for (int64_t i = 0; rc == 0 && i < count; i++)
        if (out[i] != table[a[i] * 256 + b[i % b_count]]) {
            fprintf(stderr, "quant lookup: element %lld\n", (long long)i);
            rc = 1;
        }
    /* ADD with the widest left shift and extreme zero points: in range, no UB. */
    struct nnb_quant_binary add = {NNB_QUANT_ADD, NNB_OUT_UINT8, 0, 255, 128, 24, INT32_MAX,
                                   0, -INT32_MAX, -31, INT32_MAX, 30, 0, 255};
    if (rc == 0) rc = nnb_quant_binary_table(&add, table);
    if (rc == 0 && nnb_quant_binary_lookup(a, (uint64_t)count, b, 0, table, out) != -EINVAL) rc = 1;
    free(table);
    free(a);
    free(b);
    free(out);
    if (rc) fprintf(stderr, "quant binary: %d\n", rc);
    return rc;
}

/* Softmax on random rows with exactly rows * depth bytes in and out: every
 * element of a row of equal values gets the same share. */
static int check_softmax(void) {
    const int64_t rows = between(1, 5), depth = between(1, 300);
    int32_t *exps = malloc(256 * sizeof(int32_t));
    for (int k = 0; k < 256; k++) exps[k] = INT32_MAX >> (k / 8); /* falling, positive */
    uint8_t *in = malloc((size_t)(rows * depth)), *out = malloc((size_t)(rows * depth));
    for (int64_t i = 0; i < rows * depth; i++) in[i] = (uint8_t)(i < depth ? 7 : rand());
    const int type = between(0, 1) ? NNB_OUT_INT8 : NNB_OUT_UINT8;
    int rc = nnb_softmax_quant8(in, (uint64_t)rows, (uint32_t)depth, exps, between(0, 300), type,
                                out);
    for (int64_t j = 1; rc == 0 && j < depth; j++)
        if (out[j] != out[0]) {
            fprintf(stderr, "softmax: a row of equal values differs at %lld\n", (long long)j);
            rc = 1;
        }
    free(exps);
    free(in);
    free(out);
    if (rc) fprintf(stderr, "softmax: %d\n", rc);
    return rc;
}

/* QUANTIZE with exactly count floats in and bytes out (the C loop's
 * blocks of 8 and a short last one): integers times the scale come back. */
static int check_quantize(void) {
    const int64_t count = between(0, 40);
    float *in = malloc(sizeof(float) * (size_t)(count + 1));
    uint8_t *out = malloc((size_t)count + 1);
    for (int64_t i = 0; i < count; i++) in[i] = (float)(i - 20) * 0.5f;
    int rc = nnb_quantize_f32(in, (uint64_t)count, 0.5f, 100, NNB_OUT_UINT8, out);
    for (int64_t i = 0; rc == 0 && i < count; i++)
        if (out[i] != i - 20 + 100) {
            fprintf(stderr, "quantize: element %lld is %d\n", (long long)i, out[i]);
            rc = 1;
        }
    free(in);
    free(out);
    if (rc) fprintf(stderr, "quantize: %d\n", rc);
    return rc;
}

int main(int argc, char **argv) {
    const long shapes = argc > 1 ? atol(argv[1]) : 2000;
    long runs = 0;
    srand(1);
    for (long k = 0; k < shapes; k++) {
        struct nnb_window_shape s;
        int64_t channels;
        if (!random_shape(&s, &channels)) continue;
        const int64_t columns = (channels + 15) / 16 * 16;
        const int64_t taps = s.filter_h * s.filter_w;
        const int64_t pixels = s.batches * s.in_h * s.in_w;
        float *bias = calloc((size_t)columns, sizeof(float));
        float *out = malloc(sizeof(float) * (size_t)(s.batches * s.out_h * s.out_w * channels));
        for (int path = NNB_CONV_PORTABLE; path <= NNB_CONV_AVX512; path++) {
            /* Depthwise: at least 16 input channels (the caller widens a narrow input). */
            struct nnb_window_shape d = s;
            d.in_c = channels < 16 ? 16 : channels;
            d.out_c = channels;
            float *in = ones(pixels * d.in_c), *weights = ones(taps * columns);
            int rc = nnb_depthwise_conv_f32(in, &d, weights, columns, bias, -1e30f, 1e30f, out,
                                            path);
            free(in);
            free(weights);
            if (rc == -ENOTSUP) continue; /* a path this CPU has not got */
            if (rc || check("depthwise", &d, out, 1)) return 1;
            /* CONV_2D, channels in and out. */
            struct nnb_window_shape c = s;
            c.in_c = c.out_c = channels;
            in = ones(pixels * channels);
            weights = ones(taps * channels * columns);
            rc = nnb_conv_f32(in, &c, weights, columns, bias, -1e30f, 1e30f, out, path);
            free(in);
            free(weights);
            if (rc || check("conv", &c, out, (float)channels)) return 1;
            runs += 2;
        }
        free(bias);
        free(out);
        if (check_padded_add() || check_requantize() || check_quant_binary() ||
            check_softmax() || check_quantize())
            return 1;
        runs += 5;
    }
    printf("%ld convolutions, padded adds, requantizations and quantized 8-bit kernels checked\n",
           runs);
    return 0;
}
