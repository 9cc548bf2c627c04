/* The convolution loops of kernels.c, written once for every machine.
 *
 * kernels.c includes this file once per machine, with these defined:
 *   VEC, VEC_MASK  a float vector type and its int32 mask type of LANES
 *                  lanes, the target's native width (GCC lowers a wider
 *                  vector for a narrower target through memory, 17x
 *                  slower: this is why the loops are not written once
 *                  with 16-lane vectors for all)
 *   LANES          4 (SSE, NEON), 8 (AVX2) or 16 (AVX-512)
 *   TARGET         the entry points' function attribute (or nothing)
 *   NAME(name)     name with the machine's suffix
 *   CONV_PIXELS, CONV_TILES, DEPTHWISE_PIXELS
 *                  block sizes that fit the machine's vector registers
 * and defines NAME(conv) and NAME(depthwise), the loops of nnb_conv_f32
 * and nnb_depthwise_conv_f32 (whose checks come first).  It undefines its
 * parameters at its end, for the next machine's.  A tile is the 16
 * channels of the weights' layout: PARTS vectors. */

#define PARTS (TILE / LANES)

/* Stores the first count lanes of part (all of them from LANES on), each
 * below lo as lo and each above hi as hi; NaN stays NaN (as numpy's maximum
 * and minimum).  Lane masks, since C has no ?: on vectors.  Always inlined,
 * so passing a vector costs nothing and changes no ABI (hence the pragma
 * for GCC's note on one). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
static inline __attribute__((always_inline)) void NAME(store_part)(float *o, VEC part, float lo,
                                                                   float hi, int64_t count) {
    const VEC low = (VEC){0} + lo, high = (VEC){0} + hi;
    const VEC_MASK below = part < low, above = part > high;
    VEC_MASK bits = (VEC_MASK)part;
    bits = (bits & ~below) | ((VEC_MASK)low & below);
    bits = (bits & ~above) | ((VEC_MASK)high & above);
    if (count >= LANES) {
        memcpy(o, &bits, sizeof bits); /* one vector store */
    } else { /* a copy, so that bits itself needs no address (a stack slot) */
        float lanes[LANES];
        memcpy(lanes, &bits, sizeof lanes);
        memcpy(o, lanes, count * sizeof(float));
    }
}
#pragma GCC diagnostic pop

/* Whether every tap of a block of PIXELS pixels whose first window starts
 * at input column left lies inside the input's columns (no padding read). */
static inline __attribute__((always_inline)) int NAME(block_inside)(
    const struct nnb_window_shape *s, int64_t left, const int PIXELS) {
    return left >= 0 &&
           left + (PIXELS - 1) * s->stride_w + (s->filter_w - 1) * s->dilation_w < s->in_w;
}

/* Where each of PIXELS pixels reads the tap at input column tap_x of row:
 * its pixel, or the row of zeros when that column is padding. */
static inline __attribute__((always_inline)) void NAME(tap_sources)(
    const float **source, const float *row, int64_t tap_x, const struct nnb_window_shape *s,
    const float *zeros, const int PIXELS) {
#pragma GCC unroll 16
    for (int p = 0; p < PIXELS; p++) {
        const int64_t in_x = tap_x + p * s->stride_w;
        source[p] = in_x >= 0 && in_x < s->in_w ? row + in_x * s->in_c : zeros;
    }
}

/* One filter tap for a block of PIXELS pixels x TILES tiles: every input
 * channel's weight tiles times each pixel's value, the value broadcast.
 * Pixel p's values start at first + p * step, or, when source is given,
 * at source[p] (a block at the input's edge); tile t's weights at column
 * cols[t]. */
static inline __attribute__((always_inline)) void NAME(conv_taps)(
    VEC acc[MAX_PIXELS][MAX_TILES * TILE / 4], const float *first, int64_t step,
    const float *const *source, int64_t c_in, const float *restrict w, int64_t weight_cols,
    const int64_t *cols, const int PIXELS, const int TILES) {
    for (int64_t c = 0; c < c_in; c++, w += weight_cols) {
        VEC w_parts[MAX_TILES * TILE / 4];
#pragma GCC unroll 8
        for (int k = 0; k < TILES * PARTS; k++)
            memcpy(&w_parts[k], w + cols[k / PARTS] + k % PARTS * LANES, sizeof(VEC));
#pragma GCC unroll 16
        for (int p = 0; p < PIXELS; p++) {
            const float value = source ? source[p][c] : first[p * step + c];
#pragma GCC unroll 8
            for (int k = 0; k < TILES * PARTS; k++) acc[p][k] += value * w_parts[k];
        }
    }
}

/* Sums for PIXELS consecutive output pixels of row y and TILES tiles of
 * output channels from t0: one register block.  PIXELS and TILES are
 * constants at every call, so the sums stay in registers.  Padding is
 * implicit: a row of taps above or below the input adds nothing and is
 * skipped; in a block with a pixel whose taps reach left or right of the
 * input, that pixel reads a row of zeros there instead. */
static inline __attribute__((always_inline)) void NAME(conv_block)(
    const float *restrict in, const struct nnb_window_shape *s, const float *restrict weights,
    int64_t weight_cols, const float *restrict bias, float lo, float hi, float *restrict out,
    const float *zeros, int64_t b, int64_t y, int64_t x, int64_t t0, const int PIXELS,
    const int TILES) {
    /* Each tile's first output channel.  A tile that would run past the last
     * channel ends at it instead, overlapping the tile before (recomputing a
     * few channels to the same values), so that every store is a whole
     * vector: a store of a few lanes is a call to memcpy, which took 80% of
     * a 24-channel layer's time.  Only a layer of under 16 channels keeps a
     * partial tile. */
    int64_t cols[MAX_TILES];
#pragma GCC unroll 2
    for (int t = 0; t < TILES; t++) {
        cols[t] = t0 + t * TILE;
        if (s->out_c >= TILE && cols[t] + TILE > s->out_c) cols[t] = s->out_c - TILE;
    }
    /* Fixed sizes: a variable-length array would stay in memory. */
    VEC acc[MAX_PIXELS][MAX_TILES * TILE / 4];
#pragma GCC unroll 8
    for (int k = 0; k < TILES * PARTS; k++) {
        const int64_t first = cols[k / PARTS] + k % PARTS * LANES;
        const int64_t count = s->out_c - first < LANES ? s->out_c - first : LANES;
        VEC start = {0};
        if (count == LANES)
            memcpy(&start, bias + first, sizeof start); /* one vector load */
        else if (count > 0)
            memcpy(&start, bias + first, count * sizeof(float));
#pragma GCC unroll 16
        for (int p = 0; p < PIXELS; p++) acc[p][k] = start;
    }
    const int64_t c_in = s->in_c, top = y * s->stride_h - s->pad_top;
    const int64_t left = x * s->stride_w - s->pad_left;
    const int inside = NAME(block_inside)(s, left, PIXELS);
    for (int64_t i = 0; i < s->filter_h; i++) {
        const int64_t in_y = top + i * s->dilation_h;
        if (in_y < 0 || in_y >= s->in_h) continue;
        const float *row = in + (b * s->in_h + in_y) * s->in_w * c_in;
        for (int64_t j = 0; j < s->filter_w; j++) {
            const float *w = weights + (i * s->filter_w + j) * c_in * weight_cols;
            const int64_t tap_x = left + j * s->dilation_w;
            if (inside) {
                NAME(conv_taps)(acc, row + tap_x * c_in, s->stride_w * c_in, NULL, c_in, w,
                                weight_cols, cols, PIXELS, TILES);
                continue;
            }
            const float *source[MAX_PIXELS];
            NAME(tap_sources)(source, row, tap_x, s, zeros, PIXELS);
            NAME(conv_taps)(acc, NULL, 0, source, c_in, w, weight_cols, cols, PIXELS, TILES);
        }
    }
    for (int p = 0; p < PIXELS; p++) {
        float *o = out + ((b * s->out_h + y) * s->out_w + x + p) * s->out_c;
        for (int k = 0; k < TILES * PARTS; k++) {
            const int64_t first = cols[k / PARTS] + k % PARTS * LANES;
            if (first >= s->out_c) break;
            NAME(store_part)(o + first, acc[p][k], lo, hi, s->out_c - first);
        }
    }
}

/* Channel tile t0's TILES tiles for every pixel of row y, PIXELS at a
 * time.  The row's last block ends at the row's end and overlaps the one
 * before it (recomputing a few pixels to the same values), so no pixel is
 * left to a slow block of one; rows shorter than PIXELS go 1 at a time. */
static inline __attribute__((always_inline)) void NAME(conv_row)(
    const float *in, const struct nnb_window_shape *s, const float *weights, int64_t weight_cols,
    const float *bias, float lo, float hi, float *out, const float *zeros, int64_t b, int64_t y,
    int64_t t0, const int PIXELS, const int TILES) {
    const int64_t width = s->out_w;
    if (width >= PIXELS) {
        for (int64_t x = 0; x < width; x += PIXELS)
            NAME(conv_block)(in, s, weights, weight_cols, bias, lo, hi, out, zeros, b, y,
                             x + PIXELS <= width ? x : width - PIXELS, t0, PIXELS, TILES);
        return;
    }
    for (int64_t x = 0; x < width; x++)
        NAME(conv_block)(in, s, weights, weight_cols, bias, lo, hi, out, zeros, b, y, x, t0, 1,
                         TILES);
}

/* Every output row: its channel tiles CONV_TILES at a time, CONV_PIXELS
 * pixels per block, then a last odd tile with CONV_PIXELS x CONV_TILES
 * pixels per block, which keeps as many sums in registers. */
TARGET static void NAME(conv)(const float *in, const struct nnb_window_shape *s,
                              const float *weights, int64_t weight_cols, const float *bias,
                              float lo, float hi, float *out, const float *zeros) {
    const int64_t tiles = (s->out_c + TILE - 1) / TILE;
    for (int64_t b = 0; b < s->batches; b++)
        for (int64_t y = 0; y < s->out_h; y++) {
            int64_t t = 0;
            for (; t + CONV_TILES <= tiles; t += CONV_TILES)
                NAME(conv_row)(in, s, weights, weight_cols, bias, lo, hi, out, zeros, b, y,
                               t * TILE, CONV_PIXELS, CONV_TILES);
            for (; t < tiles; t++)
                NAME(conv_row)(in, s, weights, weight_cols, bias, lo, hi, out, zeros, b, y,
                               t * TILE, CONV_PIXELS * CONV_TILES, 1);
        }
}

/* Depthwise: PIXELS consecutive output pixels of row y, channels c0 to
 * c0 + 15.  Every channel reads only itself, so each weight tile loaded
 * feeds every pixel of the block.  Padding is implicit: a tap row above or
 * below the input is skipped; with EDGE (a block of one pixel whose window
 * reaches left or right of the input) so is each tap column outside it.
 * The blocks inside the input check nothing per tap: a per-pixel table of
 * sources, as conv_block keeps, cost more than a padded copy here, with
 * only a few FMAs per tap. */
static inline __attribute__((always_inline)) void NAME(depthwise_block)(
    const float *restrict in, const struct nnb_window_shape *s, const float *restrict weights,
    int64_t weight_c, const float *restrict bias, float lo, float hi, float *restrict out,
    int64_t b, int64_t y, int64_t x, int64_t c0, const int PIXELS, const int EDGE) {
    VEC acc[MAX_PIXELS][PARTS];
#pragma GCC unroll 4
    for (int k = 0; k < PARTS; k++) {
        VEC start;
        memcpy(&start, bias + c0 + k * LANES, sizeof start);
#pragma GCC unroll 16
        for (int p = 0; p < PIXELS; p++) acc[p][k] = start;
    }
    const int64_t c_in = s->in_c, pixel_step = s->stride_w * c_in;
    const int64_t top = y * s->stride_h - s->pad_top, left = x * s->stride_w - s->pad_left;
    for (int64_t i = 0; i < s->filter_h; i++) {
        const int64_t in_y = top + i * s->dilation_h;
        if (in_y < 0 || in_y >= s->in_h) continue;
        const float *row = in + (b * s->in_h + in_y) * s->in_w * c_in + c0;
        for (int64_t j = 0; j < s->filter_w; j++) {
            const int64_t in_x = left + j * s->dilation_w;
            if (EDGE && (in_x < 0 || in_x >= s->in_w)) continue;
            const float *first = row + in_x * c_in;
            const float *w = weights + (i * s->filter_w + j) * weight_c + c0;
#pragma GCC unroll 4
            for (int k = 0; k < PARTS; k++) {
                VEC w_part;
                memcpy(&w_part, w + k * LANES, sizeof w_part);
#pragma GCC unroll 16
                for (int p = 0; p < PIXELS; p++) {
                    VEC value;
                    memcpy(&value, first + p * pixel_step + k * LANES, sizeof value);
                    acc[p][k] += value * w_part;
                }
            }
        }
    }
    for (int p = 0; p < PIXELS; p++) {
        float *o = out + ((b * s->out_h + y) * s->out_w + x + p) * s->out_c;
        for (int k = 0; k < PARTS; k++) {
            const int64_t first = c0 + k * LANES;
            if (first >= s->out_c) break;
            NAME(store_part)(o + first, acc[p][k], lo, hi, s->out_c - first);
        }
    }
}

/* Every output pixel of every row, a channel tile at a time: the pixels
 * whose windows lie inside the input's columns, [inner_lo, inner_hi],
 * DEPTHWISE_PIXELS at a time (the last block overlapping, as conv_row's),
 * and those on either side one at a time with their columns checked. */
TARGET static void NAME(depthwise)(const float *in, const struct nnb_window_shape *s,
                                   const float *weights, int64_t weight_c, const float *bias,
                                   float lo, float hi, float *out, int64_t inner_lo,
                                   int64_t inner_hi) {
    const int64_t inner = inner_hi - inner_lo + 1; /* may be 0 or less: no inner pixel */
    for (int64_t b = 0; b < s->batches; b++)
        for (int64_t y = 0; y < s->out_h; y++)
            for (int64_t c = 0; c < s->out_c; c += TILE) {
                /* A last tile past the last channel ends at it (see conv_block). */
                const int64_t c0 = s->out_c >= TILE && c + TILE > s->out_c ? s->out_c - TILE : c;
                for (int64_t x = 0; x < s->out_w; x++) {
                    if (x == inner_lo && inner >= DEPTHWISE_PIXELS) {
                        for (; x + DEPTHWISE_PIXELS <= inner_hi + 1; x += DEPTHWISE_PIXELS)
                            NAME(depthwise_block)(in, s, weights, weight_c, bias, lo, hi, out,
                                                  b, y, x, c0, DEPTHWISE_PIXELS, 0);
                        if (x <= inner_hi)
                            NAME(depthwise_block)(in, s, weights, weight_c, bias, lo, hi, out,
                                                  b, y, inner_hi + 1 - DEPTHWISE_PIXELS, c0,
                                                  DEPTHWISE_PIXELS, 0);
                        x = inner_hi;
                    } else if (x >= inner_lo && x <= inner_hi) {
                        NAME(depthwise_block)(in, s, weights, weight_c, bias, lo, hi, out, b, y,
                                              x, c0, 1, 0);
                    } else {
                        NAME(depthwise_block)(in, s, weights, weight_c, bias, lo, hi, out, b, y,
                                              x, c0, 1, 1);
                    }
                }
            }
}

#undef PARTS
#undef VEC
#undef VEC_MASK
#undef LANES
#undef TARGET
#undef NAME
#undef CONV_PIXELS
#undef CONV_TILES
#undef DEPTHWISE_PIXELS
