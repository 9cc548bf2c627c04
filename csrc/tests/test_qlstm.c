/* The quantized LSTM step (qlstm.c) under ASan and UBSan: random layers
 * (units and input sizes off the 16-channel tile, 1-3 batches, weights,
 * biases, multipliers with left and right shifts, any gate tables and
 * states, int16 extremes included), every buffer allocated at exactly the
 * size the step promises, on every path this CPU runs, each output checked
 * against a direct loop written here from the operation's definition.
 * Usage: test_qlstm [LAYERS]. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qlstm.h"

static int64_t between(int64_t lo, int64_t hi) { return lo + rand() % (hi - lo + 1); }

static int64_t floor_div(int64_t a, int64_t d) { return a >= 0 ? a / d : -((-a + d - 1) / d); }

/* x / 2^e rounded to nearest, ties away from zero. */
static int64_t rounded_pot(int64_t x, int e) {
    if (e == 0) return x;
    const int64_t half = (int64_t)1 << (e - 1);
    return x >= 0 ? (x + half) >> e : -((-x + half) >> e);
}

static int64_t sat16(int64_t x) { return x < -32768 ? -32768 : x > 32767 ? 32767 : x; }

/* Q0.15 product, rounded to nearest with ties up, -1 * -1 saturated. */
static int64_t mul16(int64_t a, int64_t b) {
    if (a == -32768 && b == -32768) return 32767;
    return floor_div(a * b + (1 << 14), 1 << 15);
}

/* MultiplyByQuantizedMultiplier, written out from its definition. */
static int64_t requantize(int64_t total, int64_t multiplier, int shift) {
    int64_t x = shift > 0 ? total * ((int64_t)1 << shift) : total;
    x = x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : x;
    const int64_t ab = x * multiplier;
    const int64_t nudged = ab + (ab >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30));
    const int64_t two31 = (int64_t)1 << 31;
    const int64_t high = nudged >= 0 ? nudged / two31 : -(-nudged / two31);
    return rounded_pot(high, shift < 0 ? -shift : 0);
}

static int check_layer(unsigned seed) {
    srand(seed);
    const int64_t units = between(1, 40), input = between(1, 70), batches = between(1, 3);
    const int64_t k = input + units, n = 4 * units;
    struct nnb_qconv g = {1, 1, k, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, n,
                          NNB_QCONV_UINT8, 128, NNB_QCONV_INT16, 0, INT16_MIN, INT16_MAX};
    int32_t *weights = malloc(sizeof(int32_t) * (size_t)(k * n));
    int32_t *bias = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < k * n; i++) weights[i] = (int32_t)between(-255, 255);
    for (int64_t i = 0; i < n; i++) bias[i] = (int32_t)between(-(1 << 22), 1 << 22);
    int32_t multiplier = (int32_t)between(1 << 30, INT32_MAX), shift = (int32_t)between(-12, 3);
    int16_t *logistic = malloc(sizeof(int16_t) * 65536), *tanh = malloc(sizeof(int16_t) * 65536);
    for (int i = 0; i < 65536; i++) {
        logistic[i] = (int16_t)between(-32768, 32767);
        tanh[i] = (int16_t)between(-32768, 32767);
    }
    logistic[0] = tanh[0] = INT16_MIN;
    uint8_t *x = malloc((size_t)(batches * input)), *prev_out = malloc((size_t)(batches * units));
    int16_t *prev_cell = malloc(sizeof(int16_t) * (size_t)(batches * units));
    for (int64_t i = 0; i < batches * input; i++) x[i] = (uint8_t)rand();
    for (int64_t i = 0; i < batches * units; i++) {
        prev_out[i] = (uint8_t)rand();
        prev_cell[i] = (int16_t)between(-32768, 32767);
    }
    prev_cell[0] = INT16_MIN;
    const int64_t packed_bytes = nnb_qconv_packed_bytes(&g);
    const int64_t scratch_bytes = nnb_qlstm16_scratch_bytes(&g);
    void *packed = malloc((size_t)packed_bytes), *scratch = malloc((size_t)scratch_bytes);
    int16_t *cell = malloc(sizeof(int16_t) * (size_t)(batches * units));
    uint8_t *out = malloc((size_t)(batches * units));
    int failures = 0;
    if (nnb_qconv_pack(&g, weights, bias, &multiplier, &shift, 0, packed, packed_bytes)) {
        fprintf(stderr, "seed %u: pack failed\n", seed);
        failures++;
    }
    for (int path = NNB_QCONV_PORTABLE; !failures && path <= NNB_QCONV_AVX2; path++) {
        if (nnb_qconv_path(path) != path) continue;
        const int rc = nnb_qlstm16_run(&g, packed, packed_bytes, logistic, tanh, x, prev_out,
                                       prev_cell, batches, cell, out, scratch, scratch_bytes, path);
        if (rc) {
            fprintf(stderr, "seed %u path %d: run returned %d\n", seed, path, rc);
            failures++;
            break;
        }
        for (int64_t b = 0; b < batches && !failures; b++)
            for (int64_t u = 0; u < units; u++) {
                int64_t gate[4];
                for (int q = 0; q < 4; q++) {
                    const int64_t o = q * units + u;
                    int64_t total = bias[o];
                    for (int64_t i = 0; i < k; i++) {
                        const int64_t v = i < input ? x[b * input + i]
                                                    : prev_out[b * units + i - input];
                        total += (v - 128) * weights[i * n + o];
                    }
                    gate[q] = sat16(requantize(total, multiplier, shift)) + 32768;
                }
                const int64_t c_prev = prev_cell[b * units + u];
                const int64_t state = sat16(rounded_pot(mul16(logistic[gate[0]], tanh[gate[1]]), 4) +
                                            mul16(logistic[gate[2]], c_prev));
                const int64_t act = mul16(logistic[gate[3]], tanh[sat16(2 * state) + 32768]);
                int64_t want = rounded_pot(act, 8);
                want = (want < -128 ? -128 : want > 127 ? 127 : want) + 128;
                if (cell[b * units + u] != state || out[b * units + u] != want) {
                    fprintf(stderr, "seed %u path %d: [%ld,%ld] cell %d (want %ld) out %d (want %ld)\n",
                            seed, path, (long)b, (long)u, cell[b * units + u], (long)state,
                            out[b * units + u], (long)want);
                    failures++;
                    break;
                }
            }
    }
    /* refusals: a gate layer of another shape or type, a short scratch */
    g.output_type = NNB_QCONV_INT8, g.hi = 127, g.lo = -128;
    failures += nnb_qlstm16_scratch_bytes(&g) != -EINVAL;
    g.output_type = NNB_QCONV_INT16, g.lo = INT16_MIN, g.hi = INT16_MAX;
    failures += nnb_qlstm16_run(&g, packed, packed_bytes, logistic, tanh, x, prev_out, prev_cell,
                                batches, cell, out, scratch, scratch_bytes - 1, 0) != -EINVAL;
    free(weights), free(bias), free(logistic), free(tanh), free(x), free(prev_out);
    free(prev_cell), free(packed), free(scratch), free(cell), free(out);
    return failures;
}

int main(int argc, char **argv) {
    const int layers = argc > 1 ? atoi(argv[1]) : 300;
    int failures = 0;
    for (int i = 0; i < layers && failures < 5; i++) failures += check_layer((unsigned)i + 1);
    printf("test_qlstm: %d layers, %d failures\n", layers, failures);
    return failures != 0;
}
