/* Compute kernels numpy has no fast form for.
 *
 * Depthwise convolution: every output channel reads only its own input
 * channel, so it is no matrix product and BLAS cannot help; numpy's einsum
 * over a window view ran face_detection_short_range's depthwise layers 5-8x
 * slower than this loop (0.87 ms against 0.10-0.18 ms on its 64x64x24 layer).
 * Channels are the innermost, contiguous axis (NHWC), so the loop over a
 * block of 8 channels vectorises and its 8 sums stay in registers across
 * the filter taps.
 *
 * The caller owns policy (padding, depth multiplier, bias, activation,
 * quantization); this file owns the arithmetic only, and checks that every
 * index it will touch lies inside the arrays it was given. */

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "nnburst.h"

#define CHANNEL_BLOCK 8

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
