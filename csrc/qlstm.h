/*
 * NNAPI's QUANTIZED_16BIT_LSTM, one step in one call (qlstm.c): the gate
 * sums of [input, previous output] by the packed gate weights are a dense
 * quantized layer of qconv.h with int16 output, then the gates and the cell
 * update run in 16-bit fixed point, with gemmlowp's logistic and tanh read
 * from tables the caller computed once.
 *
 * Every function returns 0 (or a size) or a negative errno (qconv.h's).
 */
#ifndef NNBURST_QLSTM_H
#define NNBURST_QLSTM_H

#include <stdint.h>

#include "qconv.h"

/* cffi cdef begin */
/* gates: the dense layer of the step, packed with nnb_qconv_pack: in_c =
 * input_size + units (the reference's column order), out_c = 4 * units
 * (input, cell, forget and output gates, units rows each), uint8 input with
 * zero point 128, NNB_QCONV_INT16 output with zero point 0 and the clamp
 * [-32768, 32767]; one pixel.  Bytes of a step's scratch; -EINVAL for
 * another layer. */
int64_t nnb_qlstm16_scratch_bytes(const struct nnb_qconv *gates);
/* One step over `batches` rows: x [batches, input_size] and prev_out
 * [batches, units] uint8, prev_cell [batches, units] int16 (4 integer bits);
 * cell [batches, units] int16 and out [batches, units] uint8 written.
 * logistic and tanh hold gemmlowp's logistic and tanh of every int16 value
 * read with 3 integer bits, as Q0.15, at [value + 32768]. */
int nnb_qlstm16_run(const struct nnb_qconv *gates, const void *packed, int64_t packed_bytes,
                    const int16_t *logistic, const int16_t *tanh, const uint8_t *x,
                    const uint8_t *prev_out, const int16_t *prev_cell, int64_t batches,
                    int16_t *cell, uint8_t *out, void *scratch, int64_t scratch_bytes, int path);
/* cffi cdef end */

#endif /* NNBURST_QLSTM_H */
