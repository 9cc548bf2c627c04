/* The quantized convolution kernels (qconv.c), dense and depthwise, under
 * ASan and UBSan: random
 * layers (paddings, strides, dilations, channel counts off the 16-channel
 * tile, pixel counts off the 6-pixel tile, uint8 and int8 (and int16 out of
 * the dense kernel), per-channel and
 * per-tensor multipliers with left and right shifts), every buffer
 * allocated at exactly the size the layer promises, on every path this CPU
 * runs, each output checked against a direct loop written here.  Usage:
 * test_qconv [LAYERS]. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qconv.h"

static int64_t between(int64_t lo, int64_t hi) { return lo + rand() % (hi - lo + 1); }

/* MultiplyByQuantizedMultiplier, written out from its definition. */
static int64_t requantize(int64_t total, int64_t multiplier, int shift) {
    int64_t x = shift > 0 ? total * ((int64_t)1 << shift) : total;
    x = x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : x;
    const int64_t ab = x * multiplier;
    const int64_t nudged = ab + (ab >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30));
    const int64_t two31 = (int64_t)1 << 31;
    const int64_t high = nudged >= 0 ? nudged / two31 : -(-nudged / two31);
    const int exponent = shift < 0 ? -shift : 0;
    const int64_t mask = ((int64_t)1 << exponent) - 1;
    const int64_t threshold = (mask >> 1) + (high < 0);
    const int64_t floor = high >= 0 ? high >> exponent : -((-high + mask) >> exponent);
    return floor + ((high & mask) > threshold);
}

static int check_layer(unsigned seed, int depthwise) {
    srand(seed);
    struct nnb_qconv c = {0};
    c.in_h = between(1, 9), c.in_w = between(1, 9), c.in_c = between(1, 37);
    c.filter_h = between(1, 4), c.filter_w = between(1, 4);
    c.stride_h = between(1, 3), c.stride_w = between(1, 3);
    c.dilation_h = between(1, 2), c.dilation_w = between(1, 2);
    c.pad_top = between(0, 3), c.pad_left = between(0, 3);
    /* any output size: windows past the input read the zero point */
    c.out_h = between(1, 8), c.out_w = between(1, 8), c.out_c = between(1, 40);
    if (depthwise && seed % 5 == 0) c.out_c = 8; /* two pixels a tile (MobileNet 0.25) */
    if (depthwise) c.in_c = c.out_c;
    if (!depthwise && seed % 4 == 0) { /* pointwise (1x1, stride 1, unpadded), in_c even or odd */
        c.filter_h = c.filter_w = c.stride_h = c.stride_w = 1;
        c.pad_top = c.pad_left = 0;
        c.out_h = c.in_h, c.out_w = c.in_w;
    }
    /* int16 output (a quantized LSTM's gates) for dense layers only */
    c.input_type = between(1, 2), c.output_type = between(1, depthwise ? 2 : 3);
    const int32_t in_lo = c.input_type == NNB_QCONV_UINT8 ? 0 : -128;
    const int32_t out_lo = c.output_type == NNB_QCONV_UINT8 ? 0 : -128;
    c.input_zero_point = (int32_t)between(in_lo, in_lo + 255);
    if (c.output_type == NNB_QCONV_INT16) {
        /* often the full range, as the LSTM's gates; else any clamp */
        c.output_zero_point = (int32_t)between(-2, 1) * (int32_t)between(0, 9000);
        const int full = (int)between(0, 1);
        c.lo = full ? INT16_MIN : (int32_t)between(INT16_MIN, 0);
        c.hi = full ? INT16_MAX : (int32_t)between(c.lo, INT16_MAX);
    } else {
        c.output_zero_point = (int32_t)between(out_lo, out_lo + 255);
        c.lo = (int32_t)between(out_lo, out_lo + 60);
        c.hi = (int32_t)between(c.lo, out_lo + 255);
    }
    const int64_t batches = between(1, 3), n = c.out_c;
    const int64_t k = c.filter_h * c.filter_w * (depthwise ? 1 : c.in_c);
    const int per_channel = (int)between(0, 1);
    const int64_t kinds = per_channel ? n : 1;

    int32_t *weights = malloc(sizeof(int32_t) * (size_t)(k * n));
    int32_t *bias = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *multipliers = malloc(sizeof(int32_t) * (size_t)kinds);
    int32_t *shifts = malloc(sizeof(int32_t) * (size_t)kinds);
    for (int64_t i = 0; i < k * n; i++) weights[i] = (int32_t)between(-255, 255);
    for (int64_t i = 0; i < n; i++) bias[i] = (int32_t)between(-100000, 100000);
    for (int64_t i = 0; i < kinds; i++) {
        multipliers[i] = (int32_t)between(1 << 30, INT32_MAX);
        shifts[i] = (int32_t)between(-20, 2);
    }
    const int64_t in_bytes = batches * c.in_h * c.in_w * c.in_c;
    const int64_t elem = c.output_type == NNB_QCONV_INT16 ? 2 : 1;
    const int64_t out_bytes = batches * c.out_h * c.out_w * c.out_c * elem;
    uint8_t *in = malloc((size_t)in_bytes);
    for (int64_t i = 0; i < in_bytes; i++) in[i] = (uint8_t)rand();
    const int64_t packed_bytes =
        depthwise ? nnb_qdwconv_packed_bytes(&c) : nnb_qconv_packed_bytes(&c);
    const int64_t scratch_bytes =
        depthwise ? nnb_qdwconv_scratch_bytes(&c) : nnb_qconv_scratch_bytes(&c);
    void *packed = malloc((size_t)packed_bytes);
    void *scratch = malloc((size_t)scratch_bytes);
    uint8_t *out = malloc((size_t)out_bytes);
    int failures = 0;
    int rc = (depthwise ? nnb_qdwconv_pack : nnb_qconv_pack)(&c, weights, bias, multipliers,
                                                             shifts, per_channel, packed,
                                                             packed_bytes);
    if (rc) {
        fprintf(stderr, "seed %u: pack returned %d\n", seed, rc);
        failures++;
    }
    for (int path = NNB_QCONV_PORTABLE; !failures && path <= NNB_QCONV_AVX2; path++) {
        if (nnb_qconv_path(path) != path) continue;
        memset(out, 0xA5, (size_t)out_bytes);
        rc = (depthwise ? nnb_qdwconv_run : nnb_qconv_run)(&c, packed, packed_bytes, in, batches,
                                                           out, scratch, scratch_bytes, path);
        if (rc) {
            fprintf(stderr, "seed %u path %d depthwise %d: run returned %d\n", seed, path,
                    depthwise, rc);
            failures++;
            break;
        }
        for (int64_t b = 0; b < batches && !failures; b++)
            for (int64_t y = 0; y < c.out_h; y++)
                for (int64_t x = 0; x < c.out_w; x++)
                    for (int64_t o = 0; o < n; o++) {
                        int64_t total = bias[o];
                        for (int64_t i = 0; i < c.filter_h; i++)
                            for (int64_t j = 0; j < c.filter_w; j++) {
                                const int64_t iy = y * c.stride_h + i * c.dilation_h - c.pad_top;
                                const int64_t ix = x * c.stride_w + j * c.dilation_w - c.pad_left;
                                if (iy < 0 || iy >= c.in_h || ix < 0 || ix >= c.in_w) continue;
                                for (int64_t ch = depthwise ? o : 0;
                                     ch < (depthwise ? o + 1 : c.in_c); ch++) {
                                    const uint8_t byte =
                                        in[((b * c.in_h + iy) * c.in_w + ix) * c.in_c + ch];
                                    const int64_t v = c.input_type == NNB_QCONV_INT8
                                                          ? (int8_t)byte
                                                          : byte;
                                    const int64_t row = depthwise
                                                            ? i * c.filter_w + j
                                                            : (i * c.filter_w + j) * c.in_c + ch;
                                    total += (v - c.input_zero_point) * weights[row * n + o];
                                }
                            }
                        const int64_t q = per_channel ? o : 0;
                        int64_t want = requantize(total, multipliers[q], shifts[q]) +
                                       c.output_zero_point;
                        want = want < c.lo ? c.lo : want > c.hi ? c.hi : want;
                        const int64_t at = ((b * c.out_h + y) * c.out_w + x) * n + o;
                        int16_t word = 0;
                        if (c.output_type == NNB_QCONV_INT16)
                            memcpy(&word, out + 2 * at, sizeof word);
                        const int64_t got = c.output_type == NNB_QCONV_INT16 ? word
                                            : c.output_type == NNB_QCONV_INT8 ? (int8_t)out[at]
                                                                              : out[at];
                        if (got != want) {
                            fprintf(stderr,
                                    "seed %u path %d depthwise %d: out[%ld,%ld,%ld,%ld] %ld != "
                                    "%ld\n",
                                    seed, path, depthwise, (long)b, (long)y, (long)x, (long)o,
                                    (long)got, (long)want);
                            failures++;
                            break;
                        }
                    }
    }
    free(weights), free(bias), free(multipliers), free(shifts);
    free(in), free(packed), free(scratch), free(out);
    return failures;
}

/* Arguments the kernels must refuse, not crash on. */
static int check_refusals(void) {
    struct nnb_qconv c = {1, 1, 4, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 2,
                          NNB_QCONV_UINT8, 0, NNB_QCONV_UINT8, 0, 0, 255};
    int32_t weights[8] = {1, 2, 3, 4, 5, 6, 7, 8}, bias[2] = {0, 0}, m = 1 << 30, s = -1;
    const int64_t size = nnb_qconv_packed_bytes(&c);
    int32_t *packed = malloc((size_t)size);
    int failures = 0;
    failures += nnb_qconv_pack(&c, weights, bias, &m, &s, 0, packed, size - 4) != -EINVAL;
    weights[3] = 40000; /* beyond int16 */
    failures += nnb_qconv_pack(&c, weights, bias, &m, &s, 0, packed, size) != -ERANGE;
    weights[3] = 4;
    s = 31;
    failures += nnb_qconv_pack(&c, weights, bias, &m, &s, 0, packed, size) != -ERANGE;
    s = -1;
    bias[1] = INT32_MAX - 10; /* 255 * 26 more could leave int32 */
    failures += nnb_qconv_pack(&c, weights, bias, &m, &s, 0, packed, size) != -ERANGE;
    bias[1] = 0;
    failures += nnb_qconv_pack(&c, weights, bias, &m, &s, 0, packed, size) != 0;
    uint8_t in[4] = {0}, out[2];
    int16_t scratch[64];
    failures += nnb_qconv_run(&c, packed, size, in, 1, out, scratch, 2, 0) != -EINVAL;
    failures += nnb_qconv_run(&c, packed, size, in, 1, out, scratch, sizeof scratch, 99) !=
                -ENOTSUP;
    c.lo = 10, c.hi = 5;
    failures += nnb_qconv_packed_bytes(&c) != -EINVAL;
    c.lo = 0, c.hi = 255;
    c.input_type = NNB_QCONV_INT16; /* an output type only */
    failures += nnb_qconv_packed_bytes(&c) != -EINVAL;
    c.input_type = NNB_QCONV_UINT8, c.output_type = NNB_QCONV_INT16, c.in_c = c.out_c = 2;
    failures += nnb_qconv_packed_bytes(&c) <= 0 || nnb_qdwconv_packed_bytes(&c) != -EINVAL;
    free(packed);
    if (failures) fprintf(stderr, "%d refusals failed\n", failures);
    return failures;
}

int main(int argc, char **argv) {
    const int layers = argc > 1 ? atoi(argv[1]) : 500;
    int failures = check_refusals();
    for (int i = 0; i < layers && failures < 5; i++)
        failures += check_layer((unsigned)i + 1, 0) + check_layer((unsigned)i + 1, 1);
    printf("test_qconv: %d layers of each kind, %d failures\n", layers, failures);
    return failures != 0;
}
