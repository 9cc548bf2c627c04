/*
 * nnburst C core, the kernels' contract: the compute loops of the CPU
 * driver (kernels.c) and its heap policy's mechanism (heap.c).
 *
 * Each function checks that every index it will touch lies inside the
 * arrays it was given and returns 0 or a negative errno (status.h).  Unlike
 * the queue, these may allocate: nnb_conv_f32 takes a row of zeros from the
 * heap for the padding it reads (-ENOMEM when it cannot), and
 * nnb_keep_freed_memory changes how malloc keeps memory.  They never map,
 * log or print, and keep no state between calls.
 */
#ifndef NNBURST_KERNELS_H
#define NNBURST_KERNELS_H

#include <stdint.h>

#include "status.h"

/* cffi cdef begin */
/* Raise malloc's mmap and trim thresholds (heap.c, glibc only; else
 * -ENOSYS) so freed tensors stay in the heap for the next execution.
 * -EINVAL for a value malloc refuses (the mmap threshold's ceiling is
 * 32 MiB on 64-bit glibc). */
int nnb_keep_freed_memory(int64_t mmap_threshold, int64_t trim_threshold);

/* The geometry of a float32 NHWC convolution or pooling (kernels.c). */
struct nnb_window_shape {
    int64_t batches, in_h, in_w, in_c;
    int64_t filter_h, filter_w, stride_h, stride_w, dilation_h, dilation_w;
    int64_t pad_top, pad_bottom, pad_left, pad_right; /* implicit zeros (CONV_2D only) */
    int64_t out_h, out_w, out_c;
};

/* 2-D convolution on float32 NHWC (kernels.c): out[b, y, x, o] = bias[o] +
 * sum over i, j, c of in[b, y*stride_h + i*dilation_h - pad_top, x*stride_w
 * + j*dilation_w - pad_left, c] * weights[(i*filter_w + j)*in_c + c, o],
 * clamped to [lo, hi]; the input reads as zero outside its rows and columns
 * (the shape's pads, each at most 2^30).  weights has weight_cols columns,
 * a multiple of 16 and at least out_c (the extra ones zero, so that every
 * load reads whole 16-float tiles), and bias out_c entries; all arrays are
 * C-contiguous.  -EINVAL for a shape whose windows would reach outside the
 * padded input, -ENOMEM when the row of zeros cannot be had.  path picks
 * the loop: NNB_CONV_BEST the fastest this CPU runs, the others one build
 * of it (tests run each), -ENOTSUP when this CPU or build has not got it. */
#define NNB_CONV_BEST 0
#define NNB_CONV_PORTABLE 1
#define NNB_CONV_AVX2 2
#define NNB_CONV_AVX512 3
int nnb_conv_f32(const float *in, const struct nnb_window_shape *shape, const float *weights,
                 int64_t weight_cols, const float *bias, float lo, float hi, float *out,
                 int path);
/* Depthwise 2-D convolution on float32 NHWC (kernels.c): out[b, y, x, c] =
 * bias[c] + sum over i, j of in[b, y*stride_h + i*dilation_h, x*stride_w +
 * j*dilation_w, c] * weights[i, j, c], clamped to [lo, hi], for c below
 * out_c, reading zeros for the shape's padding (rows y*stride_h - pad_top
 * + ..., columns likewise).  in has in_c channels, at least out_c and at
 * least 16 (a narrower input is padded with zero channels), so that every
 * load reads a whole 16-channel tile;
 * weights is
 * [filter_h, filter_w, weight_c] and bias [weight_c], weight_c a multiple
 * of 16 and at least out_c (zeros past it); out has out_c channels.  All
 * arrays are C-contiguous.  -EINVAL for a shape whose windows would reach
 * outside the input; path as for nnb_conv_f32. */
int nnb_depthwise_conv_f32(const float *in, const struct nnb_window_shape *shape,
                           const float *weights, int64_t weight_c, const float *bias, float lo,
                           float hi, float *out, int path);

/* Max or sum pooling on float32 NHWC (kernels.c): out[b, y, x, c] = max
 * (NNB_POOL_MAX; NaN if any is NaN) or sum (NNB_POOL_SUM) over i, j of
 * in[b, y*stride_h + i*dilation_h, x*stride_w + j*dilation_w, c].  The
 * input is already padded (the shape's pads are 0); the shape's filter is
 * the window and its in_c and out_c are both the channel count.  -EINVAL for a shape whose windows
 * would reach outside the input. */
#define NNB_POOL_MAX 1
#define NNB_POOL_SUM 2
int nnb_pool_f32(const float *in, const struct nnb_window_shape *shape, int kind, float *out);
/* ADD of a tensor and a zero-padded copy of another, in one pass, as the
 * residual blocks of MobileNet-style detectors write it (PAD of the last
 * axis, then ADD with a fused activation): for every pixel p and channel
 * c < channels, out[p, c] = clamp(a[p, c] + (c < x_channels ? x[p, c] : 0),
 * lo, hi), where a and out hold `channels` and x holds `x_channels` floats
 * per pixel.  The clamp keeps NaN, as np.maximum/np.minimum do.  -EINVAL
 * for null pointers or x_channels > channels. */
int nnb_add_padded_channels_f32(const float *a, const float *x, uint64_t pixels,
                                uint32_t channels, uint32_t x_channels, float lo, float hi,
                                float *out);
/* The requantization of a quantized convolution or fully connected layer,
 * as NNAPI's reference does it, in one pass: for every row p and channel c,
 * total = acc[p, c] + bias[c], then out[p, c] = clamp(zero_point +
 * MultiplyByQuantizedMultiplier(total, multipliers[c], shifts[c]), lo, hi):
 * a saturating left shift by max(shift, 0) to int32, gemmlowp's
 * SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT by
 * max(-shift, 0).  acc holds exact integers in float32 (a loop of this file
 * summed them); multipliers and shifts have `channels` entries, or one for
 * all (per_channel 0).  out is uint8 (NNB_OUT_UINT8) or int8
 * (NNB_OUT_INT8), [rows, channels].  -EINVAL for null pointers, an unknown
 * out type, bounds outside it, or a shift outside [-31, 30]. */
#define NNB_OUT_UINT8 1
#define NNB_OUT_INT8 2
int nnb_requantize_f32(const float *acc, uint64_t rows, uint32_t channels, const int64_t *bias,
                       const int64_t *multipliers, const int64_t *shifts, int per_channel,
                       int32_t zero_point, int32_t lo, int32_t hi, int out_type, void *out);
/* Quantized ADD (SUB: ADD with the second multiplier negated) and MUL on
 * 8-bit data (kernels.c), as a table of all 65536 pairs of input bytes
 * (256 x 256 bytes; the 8-bit inputs make every output one of them), each
 * entry by NNAPI's reference integer steps:
 *   ADD: x = (a - zero_point_a) * 2^left_shift, likewise y for b; v =
 *        MultiplyByQuantizedMultiplier(x, multiplier_a, shift_a) + the same
 *        of y with multiplier_b, shift_b;
 *   MUL: v = (a - zero_point_a) * (b - zero_point_b);
 * then clamp(zero_point_out + MultiplyByQuantizedMultiplier(v, multiplier,
 * shift), lo, hi) (see nnb_requantize_f32 for the steps).  Inputs and
 * output are all of `type` (NNB_OUT_UINT8 or NNB_OUT_INT8); table[a_byte *
 * 256 + b_byte] is the output's byte.  -EINVAL for null pointers, an
 * unknown kind or type, zero points or bounds outside the type, a shift
 * outside [-31, 30] or a left_shift outside [0, 24]. */
#define NNB_QUANT_ADD 1
#define NNB_QUANT_MUL 2
struct nnb_quant_binary {
    int32_t kind, type;
    int32_t zero_point_a, zero_point_b, zero_point_out;
    int32_t left_shift, multiplier_a, shift_a, multiplier_b, shift_b; /* ADD only */
    int32_t multiplier, shift, lo, hi;
};
int nnb_quant_binary_table(const struct nnb_quant_binary *params, uint8_t *table);
/* out[i] = table[a[i] * 256 + b[i % b_count]] for i < count: a table of
 * nnb_quant_binary_table applied to bytes.  a and out hold count bytes, b
 * holds b_count that repeat along a (b_count == count for two tensors of
 * one shape, 1 for a scalar, the last axis for a per-channel operand);
 * table 65536.  -EINVAL for null pointers or a b_count that is 0 or does
 * not divide count. */
int nnb_quant_binary_lookup(const uint8_t *a, uint64_t count, const uint8_t *b, uint64_t b_count,
                            const uint8_t *table, uint8_t *out);
/* Quantized SOFTMAX over the last axis of [rows, depth] 8-bit data (type as
 * above), the reference's fixed point (cpu/ops/activation.py) with the
 * exponentials looked up: exps[k] is exp(-k input steps times beta) in
 * Q0.31, for k in 0..255 (256 entries), and an element more than radius
 * steps below its row's maximum counts as exp 0 and comes out as the
 * type's minimum.  Per row: the Q12.19 exps summed with int32 wrap-around,
 * its reciprocal by gemmlowp's one_over_one_plus_x_for_x_in_0_1, each
 * output exp times that, rounded to 1/256 steps (zero point 0 for uint8,
 * -128 for int8) and clamped.  -EINVAL for null pointers, depth 0 or an
 * unknown type. */
int nnb_softmax_quant8(const void *in, uint64_t rows, uint32_t depth, const int32_t *exps,
                       int64_t radius, int type, void *out);
/* QUANTIZE of float32 to 8 bits (out_type as above): out = clamp(round(in
 * / scale) + zero_point) with the division and addition in float32, round
 * half away from zero (std::round), the clamp to the type's range and a NaN
 * to its top (as std::min(hi, NaN) keeps hi).  -EINVAL for null pointers or
 * an unknown type. */
int nnb_quantize_f32(const float *in, uint64_t count, float scale, int32_t zero_point,
                     int out_type, void *out);
/* cffi cdef end */

#endif /* NNBURST_KERNELS_H */
