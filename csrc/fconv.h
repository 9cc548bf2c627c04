/*
 * Float32 2-D convolution and fully connected layers on packed weights
 * (fconv.c): the weights, bias and fused clamp of a layer are packed once
 * (nnb_fconv_pack) when its model is prepared, into the 16-channel panels
 * the micro-kernel reads; a run (nnb_fconv_run) reads the input in place
 * (no im2col copy), keeps a tile of 6 output pixels x 16 channels in
 * registers over every tap, and adds nothing after it: the bias is the
 * tile's first value and the clamp happens as it is stored.
 *
 * Every function returns 0 (or a size) or a negative errno:
 *   -EINVAL   a bad argument (a geometry that makes no sense, a buffer of
 *             the wrong size, lo > hi)
 *   -ENOTSUP  a path this build or CPU has not got
 */
#ifndef NNBURST_FCONV_H
#define NNBURST_FCONV_H

#include <stdint.h>

/* cffi cdef begin */
/* One layer.  out[b, y, x, o] = clamp(bias[o] + sum over i < filter_h,
 * j < filter_w, c < in_c of in[b, y*stride_h + i*dilation_h - pad_top,
 * x*stride_w + j*dilation_w - pad_left, c] * weights[(i*filter_w + j)*in_c
 * + c, o], lo, hi); a tap outside the input reads 0.  The clamp keeps NaN
 * (as numpy's maximum and minimum).  Data is NHWC float32.  A fully
 * connected layer is the 1x1 case: in_h = in_w = out_h = out_w = 1, in_c
 * its input size, batches its rows. */
struct nnb_fconv {
    int64_t in_h, in_w, in_c;
    int64_t filter_h, filter_w, stride_h, stride_w, dilation_h, dilation_w;
    int64_t pad_top, pad_left;
    int64_t out_h, out_w, out_c;
    float lo, hi;
};
/* Paths: NNB_FCONV_BEST the fastest this CPU runs, the others one build of
 * the micro-kernel (tests run each).  nnb_fconv_path gives the path a
 * request resolves to, -ENOTSUP for one this build or CPU has not got. */
#define NNB_FCONV_BEST 0
#define NNB_FCONV_PORTABLE 1
#define NNB_FCONV_AVX2 2
int nnb_fconv_path(int path);
/* Bytes of the packed layer and of a run's scratch; -EINVAL for a bad layer. */
int64_t nnb_fconv_packed_bytes(const struct nnb_fconv *layer);
int64_t nnb_fconv_scratch_bytes(const struct nnb_fconv *layer);
/* Packs weights [filter_h*filter_w*in_c, out_c] and bias [out_c] (both
 * C-contiguous float32) into packed, of exactly nnb_fconv_packed_bytes and
 * float-aligned.  Every path reads the same layout. */
int nnb_fconv_pack(const struct nnb_fconv *layer, const float *weights, const float *bias,
                   void *packed, int64_t packed_bytes);
/* The layer over `batches` images: in [batches, in_h, in_w, in_c] and out
 * [batches, out_h, out_w, out_c] floats; scratch of at least
 * nnb_fconv_scratch_bytes, pointer-aligned, its contents anything.  Calls
 * may run at once on one packed layer (each with its own scratch). */
int nnb_fconv_run(const struct nnb_fconv *layer, const void *packed, int64_t packed_bytes,
                  const float *in, int64_t batches, float *out, void *scratch,
                  int64_t scratch_bytes, int path);
/* Depthwise convolution, depth multiplier 1 (in_c == out_c): out[b, y, x, c]
 * = clamp(bias[c] + sum over i, j of in[b, y*stride_h + i*dilation_h -
 * pad_top, x*stride_w + j*dilation_w - pad_left, c] * weights[i*filter_w +
 * j, c], lo, hi); weights [filter_h*filter_w, out_c].  Filters 3 and 5
 * wide with stride 1 or 2 and dilation 1 (MobileNet's) keep 8 output
 * pixels x 8 channels in registers and load each input vector of a row
 * once for all the taps and pixels that read it: over the input rows in
 * place when the channels are a multiple of 8 and the rows are wide
 * enough that the few windows at their ends (checking their taps) cost
 * less than a copy, else over a ring of rows in the scratch, each
 * copied once with the padding and the channels rounded up to 8 around it,
 * so that no tap checks a bound.  Other shapes run a plain loop over the
 * ring.
 * Functions as their nnb_fconv_ counterparts. */
int64_t nnb_fdwconv_packed_bytes(const struct nnb_fconv *layer);
int64_t nnb_fdwconv_scratch_bytes(const struct nnb_fconv *layer);
int nnb_fdwconv_pack(const struct nnb_fconv *layer, const float *weights, const float *bias,
                     void *packed, int64_t packed_bytes);
int nnb_fdwconv_run(const struct nnb_fconv *layer, const void *packed, int64_t packed_bytes,
                    const float *in, int64_t batches, float *out, void *scratch,
                    int64_t scratch_bytes, int path);
/* cffi cdef end */

#endif /* NNBURST_FCONV_H */
