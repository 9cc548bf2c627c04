/*
 * Quantized (uint8/int8) 2-D convolution and fully connected layers with
 * exact int32 sums and NNAPI's requantization fused into the output loop
 * (qconv.c).  A layer is packed once (nnb_qconv_pack), when its model is
 * prepared; a run (nnb_qconv_run) reads the input in place, sums in int32
 * registers and writes the output bytes, with no float copy of the input
 * and no second pass over the sums.
 *
 * Every function returns 0 (or a size) or a negative errno:
 *   -EINVAL   a bad argument (a geometry that makes no sense, a buffer of
 *             the wrong size, an unknown type)
 *   -ERANGE   a layer these kernels cannot compute exactly: a weight
 *             outside int16 after its zero point, a multiplier below 0, a
 *             shift outside [-31, 30], or a sum that could leave int32.
 *             The caller keeps its other path for it.
 *   -ENOTSUP  a path this build or CPU has not got
 */
#ifndef NNBURST_QCONV_H
#define NNBURST_QCONV_H

#include <stdint.h>

/* cffi cdef begin */
/* One layer.  out[b, y, x, o] = clamp(output_zero_point +
 * MultiplyByQuantizedMultiplier(sum + bias[o], multiplier[o], shift[o]),
 * lo, hi) with sum over i < filter_h, j < filter_w, c < in_c of
 * (in[b, y*stride_h + i*dilation_h - pad_top, x*stride_w + j*dilation_w -
 * pad_left, c] - input_zero_point) * weights[(i*filter_w + j)*in_c + c, o];
 * a tap outside the input counts as the zero point (adds 0).  The fixed
 * point steps are the NNAPI reference's (a saturating left shift by
 * max(shift, 0), gemmlowp's SaturatingRoundingDoublingHighMul, then
 * RoundingDivideByPOT by max(-shift, 0)).  Data is NHWC, uint8 or int8
 * (NNB_QCONV_UINT8, NNB_QCONV_INT8); the output of a dense layer may also be
 * NNB_QCONV_INT16 (a quantized LSTM's gates: two bytes an element, zero
 * point and clamp in int16).  A fully connected layer is the 1x1 case: in_h =
 * in_w = out_h = out_w = 1, in_c its input size. */
#define NNB_QCONV_UINT8 1
#define NNB_QCONV_INT8 2
#define NNB_QCONV_INT16 3
struct nnb_qconv {
    int64_t in_h, in_w, in_c;
    int64_t filter_h, filter_w, stride_h, stride_w, dilation_h, dilation_w;
    int64_t pad_top, pad_left;
    int64_t out_h, out_w, out_c;
    int32_t input_type, input_zero_point;
    int32_t output_type, output_zero_point, lo, hi;
};
/* Paths: NNB_QCONV_BEST the fastest this CPU runs, the others one build of
 * the loop (tests run each).  nnb_qconv_path gives the path a request
 * resolves to, -ENOTSUP for one this build or CPU has not got. */
#define NNB_QCONV_BEST 0
#define NNB_QCONV_PORTABLE 1
#define NNB_QCONV_AVX2 2
int nnb_qconv_path(int path);
/* Bytes of the packed layer and of a run's scratch; -EINVAL for a bad layer. */
int64_t nnb_qconv_packed_bytes(const struct nnb_qconv *layer);
int64_t nnb_qconv_scratch_bytes(const struct nnb_qconv *layer);
/* Packs weights [filter_h*filter_w*in_c, out_c] (each already minus the
 * filter's zero point), bias [out_c], and multipliers and shifts (out_c of
 * each, or one for every channel when per_channel is 0) into packed, of
 * exactly nnb_qconv_packed_bytes.  Every path reads the same layout. */
int nnb_qconv_pack(const struct nnb_qconv *layer, const int32_t *weights, const int32_t *bias,
                   const int32_t *multipliers, const int32_t *shifts, int per_channel,
                   void *packed, int64_t packed_bytes);
/* The layer over `batches` images: in [batches, in_h, in_w, in_c] bytes and
 * out [batches, out_h, out_w, out_c] elements of the output type; scratch of at least
 * nnb_qconv_scratch_bytes, its contents anything.  Calls may run at once on
 * one packed layer (each with its own scratch). */
int nnb_qconv_run(const struct nnb_qconv *layer, const void *packed, int64_t packed_bytes,
                  const void *in, int64_t batches, void *out, void *scratch,
                  int64_t scratch_bytes, int path);
/* Depthwise convolution, depth multiplier 1 (in_c == out_c): out[b, y, x, c]
 * as above with the sum over i, j of (in[..., c] - input_zero_point) *
 * weights[i*filter_w + j, c]; weights [filter_h*filter_w, out_c], at most
 * 256 taps, 8-bit output.  Functions as their nnb_qconv_ counterparts. */
int64_t nnb_qdwconv_packed_bytes(const struct nnb_qconv *layer);
int64_t nnb_qdwconv_scratch_bytes(const struct nnb_qconv *layer);
int nnb_qdwconv_pack(const struct nnb_qconv *layer, const int32_t *weights, const int32_t *bias,
                     const int32_t *multipliers, const int32_t *shifts, int per_channel,
                     void *packed, int64_t packed_bytes);
int nnb_qdwconv_run(const struct nnb_qconv *layer, const void *packed, int64_t packed_bytes,
                    const void *in, int64_t batches, void *out, void *scratch,
                    int64_t scratch_bytes, int path);
/* cffi cdef end */

#endif /* NNBURST_QCONV_H */
