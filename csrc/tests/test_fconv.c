/* The float convolution kernels (fconv.c) under ASan and UBSan: random
 * layers (paddings, strides, dilations, channel counts off the 16-channel
 * tile and under it, pixel counts off the 6-pixel tile, fully connected
 * rows, clamps), every buffer allocated at exactly the size the layer
 * promises, on every path this CPU runs.  Inputs, weights and biases are
 * multiples of 1/4 of at most a few units, so every sum is exact in
 * float32 whatever the order or the FMA: each output must equal a direct
 * loop written here exactly.  A NaN input must come out NaN through the
 * clamp.  Then depthwise layers (nnb_fdwconv_*) the same way, a third of
 * them of whole vectors of channels (rows read in place).  Usage:
 * test_fconv [LAYERS]. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fconv.h"

static int64_t between(int64_t lo, int64_t hi) { return lo + rand() % (hi - lo + 1); }

static float quarter(void) { return (float)between(-12, 12) / 4; }

static int check_layer(unsigned seed) {
    srand(seed);
    struct nnb_fconv c = {0};
    const int dense = rand() % 4 == 0; /* a fully connected layer: one pixel, rows of batches */
    c.in_h = dense ? 1 : between(1, 9), c.in_w = dense ? 1 : between(1, 9);
    c.in_c = between(1, 37);
    c.filter_h = dense ? 1 : between(1, 5), c.filter_w = dense ? 1 : between(1, 5);
    c.stride_h = between(1, 2), c.stride_w = between(1, 2);
    c.dilation_h = between(1, 2), c.dilation_w = between(1, 2);
    c.pad_top = dense ? 0 : between(0, 2), c.pad_left = dense ? 0 : between(0, 2);
    /* any output size: windows past the input read zeros */
    c.out_h = dense ? 1 : between(1, 8), c.out_w = dense ? 1 : between(1, 8);
    c.out_c = between(1, 40);
    c.lo = rand() % 2 ? -INFINITY : (float)between(-4, 0);
    c.hi = rand() % 2 ? INFINITY : (float)between(0, 6);
    const int64_t batches = between(1, dense ? 13 : 3), n = c.out_c;
    const int64_t k = c.filter_h * c.filter_w * c.in_c;
    const int64_t in_count = batches * c.in_h * c.in_w * c.in_c;
    const int64_t out_count = batches * c.out_h * c.out_w * n;

    float *weights = malloc(sizeof(float) * (size_t)(k * n));
    float *bias = malloc(sizeof(float) * (size_t)n);
    float *in = malloc(sizeof(float) * (size_t)in_count);
    float *expected = malloc(sizeof(float) * (size_t)out_count);
    float *out = malloc(sizeof(float) * (size_t)out_count);
    for (int64_t i = 0; i < k * n; i++) weights[i] = quarter();
    for (int64_t i = 0; i < n; i++) bias[i] = quarter();
    for (int64_t i = 0; i < in_count; i++) in[i] = quarter();
    const int64_t nan_at = rand() % 3 == 0 ? between(0, in_count - 1) : -1;
    if (nan_at >= 0) in[nan_at] = NAN;

    for (int64_t b = 0, o = 0; b < batches; b++)
        for (int64_t y = 0; y < c.out_h; y++)
            for (int64_t x = 0; x < c.out_w; x++)
                for (int64_t ch = 0; ch < n; ch++, o++) {
                    double total = bias[ch];
                    for (int64_t i = 0; i < c.filter_h; i++)
                        for (int64_t j = 0; j < c.filter_w; j++) {
                            const int64_t iy = y * c.stride_h + i * c.dilation_h - c.pad_top;
                            const int64_t ix = x * c.stride_w + j * c.dilation_w - c.pad_left;
                            if (iy < 0 || iy >= c.in_h || ix < 0 || ix >= c.in_w) continue;
                            for (int64_t ci = 0; ci < c.in_c; ci++)
                                total += (double)in[((b * c.in_h + iy) * c.in_w + ix) * c.in_c +
                                                    ci] *
                                         weights[((i * c.filter_w + j) * c.in_c + ci) * n + ch];
                        }
                    const float v = (float)total;
                    expected[o] = v < c.lo ? c.lo : v > c.hi ? c.hi : v;
                }

    const int64_t packed_bytes = nnb_fconv_packed_bytes(&c);
    const int64_t scratch_bytes = nnb_fconv_scratch_bytes(&c);
    if (packed_bytes <= 0 || scratch_bytes <= 0) {
        fprintf(stderr, "seed %u: sizes %lld %lld\n", seed, (long long)packed_bytes,
                (long long)scratch_bytes);
        return 1;
    }
    void *packed = malloc((size_t)packed_bytes);
    void *scratch = malloc((size_t)scratch_bytes);
    int failures = 0;
    if (nnb_fconv_pack(&c, weights, bias, packed, packed_bytes) != 0) {
        fprintf(stderr, "seed %u: pack failed\n", seed);
        failures++;
    }
    for (int path = NNB_FCONV_PORTABLE; path <= NNB_FCONV_AVX2 && !failures; path++) {
        if (nnb_fconv_path(path) != path) continue;
        memset(out, 0x7f, sizeof(float) * (size_t)out_count);
        memset(scratch, 0x55, (size_t)scratch_bytes); /* contents anything */
        const int rc =
            nnb_fconv_run(&c, packed, packed_bytes, in, batches, out, scratch, scratch_bytes, path);
        if (rc != 0) {
            fprintf(stderr, "seed %u path %d: run returned %d\n", seed, path, rc);
            failures++;
            break;
        }
        for (int64_t i = 0; i < out_count; i++) {
            const int same = isnan(expected[i]) ? isnan(out[i]) : out[i] == expected[i];
            if (!same) {
                fprintf(stderr,
                        "seed %u path %d: out[%lld] = %g, expected %g (in %lldx%lldx%lld "
                        "filter %lldx%lld out %lldx%lldx%lld)\n",
                        seed, path, (long long)i, out[i], expected[i], (long long)c.in_h,
                        (long long)c.in_w, (long long)c.in_c, (long long)c.filter_h,
                        (long long)c.filter_w, (long long)c.out_h, (long long)c.out_w,
                        (long long)c.out_c);
                failures++;
                break;
            }
        }
    }
    free(weights), free(bias), free(in), free(expected), free(out), free(packed), free(scratch);
    return failures;
}

/* A depthwise layer: mostly the register loop's shapes (3 or 5 wide,
 * stride 1 or 2, dilation 1), some others. */
static int check_depthwise_layer(unsigned seed) {
    srand(seed);
    struct nnb_fconv c = {0};
    const int common = rand() % 4 != 0;
    c.in_h = between(1, 12), c.in_w = between(1, 20), c.in_c = between(1, 37);
    c.out_c = c.in_c;
    c.filter_w = common ? (rand() % 2 ? 3 : 5) : between(1, 5);
    c.filter_h = common ? c.filter_w : between(1, 5);
    c.stride_h = c.stride_w = between(1, 2);
    if (!common) c.stride_h = between(1, 2);
    c.dilation_h = c.dilation_w = common ? 1 : between(1, 2);
    c.pad_top = between(0, 2), c.pad_left = between(0, 2);
    c.out_h = between(1, 8), c.out_w = between(1, 19);
    if (rand() % 3 == 0) { /* 8k channels: rows read in place, windows checked at the ends */
        c.in_c = c.out_c = 8 * between(1, 4);
        if (rand() % 2) { /* or every window inside its row */
            const int64_t reach = (c.filter_w - 1) * c.dilation_w + 1;
            c.pad_left = 0, c.in_w = between(reach, 20);
            c.out_w = between(1, (c.in_w - reach) / c.stride_w + 1);
        }
    }
    c.lo = rand() % 2 ? -INFINITY : (float)between(-4, 0);
    c.hi = rand() % 2 ? INFINITY : (float)between(0, 6);
    const int64_t batches = between(1, 3), n = c.out_c, taps = c.filter_h * c.filter_w;
    const int64_t in_count = batches * c.in_h * c.in_w * c.in_c;
    const int64_t out_count = batches * c.out_h * c.out_w * n;
    float *weights = malloc(sizeof(float) * (size_t)(taps * n));
    float *bias = malloc(sizeof(float) * (size_t)n);
    float *in = malloc(sizeof(float) * (size_t)in_count);
    float *expected = malloc(sizeof(float) * (size_t)out_count);
    float *out = malloc(sizeof(float) * (size_t)out_count);
    for (int64_t i = 0; i < taps * n; i++) weights[i] = quarter();
    for (int64_t i = 0; i < n; i++) bias[i] = quarter();
    for (int64_t i = 0; i < in_count; i++) in[i] = quarter();
    if (rand() % 3 == 0) in[between(0, in_count - 1)] = NAN;
    for (int64_t b = 0, o = 0; b < batches; b++)
        for (int64_t y = 0; y < c.out_h; y++)
            for (int64_t x = 0; x < c.out_w; x++)
                for (int64_t ch = 0; ch < n; ch++, o++) {
                    double total = bias[ch];
                    for (int64_t i = 0; i < c.filter_h; i++)
                        for (int64_t j = 0; j < c.filter_w; j++) {
                            const int64_t iy = y * c.stride_h + i * c.dilation_h - c.pad_top;
                            const int64_t ix = x * c.stride_w + j * c.dilation_w - c.pad_left;
                            if (iy < 0 || iy >= c.in_h || ix < 0 || ix >= c.in_w) continue;
                            total += (double)in[((b * c.in_h + iy) * c.in_w + ix) * n + ch] *
                                     weights[(i * c.filter_w + j) * n + ch];
                        }
                    const float v = (float)total;
                    expected[o] = v < c.lo ? c.lo : v > c.hi ? c.hi : v;
                }
    const int64_t packed_bytes = nnb_fdwconv_packed_bytes(&c);
    const int64_t scratch_bytes = nnb_fdwconv_scratch_bytes(&c);
    int failures = packed_bytes <= 0 || scratch_bytes <= 0;
    void *packed = malloc(failures ? 1 : (size_t)packed_bytes);
    void *scratch = malloc(failures ? 1 : (size_t)scratch_bytes);
    if (!failures && nnb_fdwconv_pack(&c, weights, bias, packed, packed_bytes) != 0) failures++;
    for (int path = NNB_FCONV_PORTABLE; path <= NNB_FCONV_AVX2 && !failures; path++) {
        if (nnb_fconv_path(path) != path) continue;
        memset(out, 0x7f, sizeof(float) * (size_t)out_count);
        memset(scratch, 0x55, (size_t)scratch_bytes);
        if (nnb_fdwconv_run(&c, packed, packed_bytes, in, batches, out, scratch, scratch_bytes,
                            path) != 0) {
            failures++;
            break;
        }
        for (int64_t i = 0; i < out_count; i++)
            if (isnan(expected[i]) ? !isnan(out[i]) : out[i] != expected[i]) {
                fprintf(stderr,
                        "depthwise seed %u path %d: out[%lld] = %g, expected %g (in %lldx%lldx%lld "
                        "filter %lldx%lld/%lld out %lldx%lld)\n",
                        seed, path, (long long)i, out[i], expected[i], (long long)c.in_h,
                        (long long)c.in_w, (long long)n, (long long)c.filter_h,
                        (long long)c.filter_w, (long long)c.stride_w, (long long)c.out_h,
                        (long long)c.out_w);
                failures++;
                break;
            }
    }
    if (failures && packed_bytes <= 0) fprintf(stderr, "depthwise seed %u: sizes\n", seed);
    free(weights), free(bias), free(in), free(expected), free(out), free(packed), free(scratch);
    return failures;
}

static int check_refusals(void) {
    struct nnb_fconv c = {3, 3, 4, 3, 3, 1, 1, 1, 1, 1, 1, 3, 3, 5, 0.0f, 6.0f};
    const int64_t packed_bytes = nnb_fconv_packed_bytes(&c);
    float weights[36 * 5] = {0}, bias[5] = {0}, in[36] = {0}, out[45];
    float *packed = malloc((size_t)packed_bytes);
    void *scratch[512];
    int failures = 0;
    failures += nnb_fconv_pack(&c, weights, bias, packed, packed_bytes - 4) != -EINVAL;
    failures += nnb_fconv_pack(&c, weights, bias, packed, packed_bytes) != 0;
    failures += nnb_fconv_run(&c, packed, packed_bytes, in, 1, out, scratch, 8, 0) != -EINVAL;
    failures += nnb_fconv_run(&c, packed, packed_bytes, in, 1, out, scratch, sizeof scratch,
                              99) != -ENOTSUP;
    struct nnb_fconv bad = c;
    bad.lo = 7.0f; /* above hi */
    failures += nnb_fconv_packed_bytes(&bad) != -EINVAL;
    bad = c, bad.hi = NAN;
    failures += nnb_fconv_packed_bytes(&bad) != -EINVAL;
    bad = c, bad.stride_w = 0;
    failures += nnb_fconv_scratch_bytes(&bad) != -EINVAL;
    bad = c, bad.pad_left = -1;
    failures += nnb_fconv_packed_bytes(&bad) != -EINVAL;
    free(packed);
    if (failures) fprintf(stderr, "refusals: %d wrong\n", failures);
    return failures;
}

int main(int argc, char **argv) {
    const int layers = argc > 1 ? atoi(argv[1]) : 500;
    int failures = check_refusals();
    for (int i = 0; i < layers && failures < 5; i++) failures += check_layer((unsigned)i + 1);
    for (int i = 0; i < layers && failures < 5; i++)
        failures += check_depthwise_layer((unsigned)i + 1);
    struct nnb_fconv mixed = {3, 3, 4, 3, 3, 1, 1, 1, 1, 1, 1, 3, 3, 5, 0.0f, 6.0f};
    failures += nnb_fdwconv_packed_bytes(&mixed) != -EINVAL; /* in_c != out_c */
    printf("fconv: %d layers and %d depthwise, paths portable%s: %s\n", layers,
           layers, nnb_fconv_path(NNB_FCONV_AVX2) == NNB_FCONV_AVX2 ? " avx2" : "",
           failures ? "FAILED" : "ok");
    return failures != 0;
}
