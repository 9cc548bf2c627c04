/* QUANTIZED_16BIT_LSTM in one call (qlstm.h).
 *
 * Why: the numpy step (cpu/ops/quantized_lstm.py) summed the gates with a
 * float32 BLAS product and then ran ~40 numpy calls on 4 x units values;
 * on ML Kit's recognizer (96 units) that was ~250 us a cell where the sums
 * are a few us of pmaddwd.  Here the sums are qconv's exact int32 ones,
 * requantized into int16 as they leave the registers, and the cell update
 * is one loop over the units.
 *
 * Exactness: every step below is the reference's (and the numpy
 * module's) integer arithmetic on int32 values that cannot overflow: the
 * gates are int16, their products below 2^31. */

#include "qlstm.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* gemmlowp's SaturatingRoundingDoublingHighMul for int16: a * b * 2 / 2^16
 * rounded to nearest (ties away from zero through the nudge, then a
 * truncating division), saturated where both are -32768. */
static int32_t mul16(int32_t a, int32_t b) {
    if (a == INT16_MIN && b == INT16_MIN) return INT16_MAX;
    const int32_t ab = a * b;
    return (ab + (ab >= 0 ? (1 << 14) : 1 - (1 << 14))) / (1 << 15);
}

/* gemmlowp's RoundingDivideByPOT: x / 2^exponent, ties away from zero. */
static int32_t divide_by_pot(int32_t x, int exponent) {
    const int32_t mask = (1 << exponent) - 1;
    const int32_t threshold = (mask >> 1) + (x < 0);
    return (x >> exponent) + ((x & mask) > threshold);
}

static int32_t saturated16(int32_t x) {
    return x < INT16_MIN ? INT16_MIN : x > INT16_MAX ? INT16_MAX : x;
}

/* The layer is the gates' (see qlstm.h); units and input size from it. */
static int gate_layer(const struct nnb_qconv *g, int64_t *units) {
    if (g == NULL || g->in_h != 1 || g->in_w != 1 || g->filter_h != 1 || g->filter_w != 1 ||
        g->out_h != 1 || g->out_w != 1 || g->out_c % 4 != 0 || g->out_c / 4 >= g->in_c ||
        g->input_type != NNB_QCONV_UINT8 || g->input_zero_point != 128 ||
        g->output_type != NNB_QCONV_INT16 || g->output_zero_point != 0 || g->lo != INT16_MIN ||
        g->hi != INT16_MAX || nnb_qconv_scratch_bytes(g) < 0)
        return 0;
    *units = g->out_c / 4;
    return 1;
}

/* The scratch: the row [x, prev_out] (in_c bytes, rounded up to 8), the
 * gates (out_c int16), then qconv's scratch. */
static int64_t row_bytes(const struct nnb_qconv *g) { return (g->in_c + 7) / 8 * 8; }

int64_t nnb_qlstm16_scratch_bytes(const struct nnb_qconv *gates) {
    int64_t units;
    if (!gate_layer(gates, &units)) return -EINVAL;
    return row_bytes(gates) + 2 * gates->out_c + nnb_qconv_scratch_bytes(gates);
}

int nnb_qlstm16_run(const struct nnb_qconv *gates, const void *packed, int64_t packed_bytes,
                    const int16_t *logistic, const int16_t *tanh, const uint8_t *x,
                    const uint8_t *prev_out, const int16_t *prev_cell, int64_t batches,
                    int16_t *cell, uint8_t *out, void *scratch, int64_t scratch_bytes, int path) {
    int64_t units;
    if (!gate_layer(gates, &units) || logistic == NULL || tanh == NULL || x == NULL ||
        prev_out == NULL || prev_cell == NULL || cell == NULL || out == NULL ||
        scratch == NULL || (uintptr_t)scratch % sizeof(int16_t) || batches < 0 ||
        scratch_bytes < nnb_qlstm16_scratch_bytes(gates) || batches > ((int64_t)1 << 30) / gates->in_c)
        return -EINVAL;
    const int64_t input_size = gates->in_c - units;
    uint8_t *row = scratch;
    int16_t *g = (int16_t *)(row + row_bytes(gates));
    void *conv_scratch = g + gates->out_c;
    const int64_t conv_bytes = nnb_qconv_scratch_bytes(gates);
    for (int64_t b = 0; b < batches; b++) {
        memcpy(row, x + b * input_size, (size_t)input_size);
        memcpy(row + input_size, prev_out + b * units, (size_t)units);
        const int rc = nnb_qconv_run(gates, packed, packed_bytes, row, 1, g, conv_scratch,
                                     conv_bytes, path);
        if (rc) return rc;
        const int16_t *c_prev = prev_cell + b * units;
        int16_t *c_out = cell + b * units;
        uint8_t *o = out + b * units;
        for (int64_t u = 0; u < units; u++) {
            const int32_t input_gate = logistic[g[u] + 32768];
            const int32_t modulation = tanh[g[units + u] + 32768];
            const int32_t forget_gate = logistic[g[2 * units + u] + 32768];
            const int32_t output_gate = logistic[g[3 * units + u] + 32768];
            /* the cell state has 4 integer bits: input x modulation (Q0.15 x
             * Q0.15 -> Q0.15) divided by 2^4, plus forget x the old state */
            const int32_t state = saturated16(divide_by_pot(mul16(input_gate, modulation), 4) +
                                              mul16(forget_gate, c_prev[u]));
            /* tanh of the state read with 3 integer bits: the state times 2,
             * saturated (SaturatingRoundingMultiplyByPOT<1>) */
            const int32_t doubled = saturated16(state * 2);
            const int32_t activation = mul16(output_gate, tanh[doubled + 32768]);
            int32_t q = divide_by_pot(activation, 8);
            q = q < -128 ? -128 : q > 127 ? 127 : q;
            c_out[u] = (int16_t)state;
            o[u] = (uint8_t)(q + 128);
        }
    }
    return 0;
}
