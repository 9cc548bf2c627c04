"""QUANTIZED_16BIT_LSTM steps on the C kernel of ``csrc/qlstm.c``.

The gates are a dense quantized layer of ``csrc/qconv.c`` with int16 output
(exact int32 sums, NNAPI's requantization as they leave the registers) and
the cell update one C loop, so a step is one call instead of a float BLAS
product and ~40 numpy passes.  Built once per prepared operation
(:class:`QuantLstm16`); a layer the kernels cannot sum exactly raises
:class:`~.qconv.NotExactError` and keeps the numpy step.
"""

from __future__ import annotations

import numpy as np

from ..errors import BadDataError
from .compiled import ffi, lib
from .qconv import PATH_BEST, QuantConv, _error

_INT16 = (-32768, 32767)


class QuantLstm16:
    """One QUANTIZED_16BIT_LSTM with constant weights: ``(cell, output) = lstm(x,
    prev_output, prev_cell)``.  Safe to call from several threads (each call has
    its own scratch)."""

    __slots__ = (
        "units", "input_size", "_gates", "_fields", "_tables", "_keep", "_scratch", "_path",
    )  # fmt: skip

    def __init__(
        self,
        weights: np.ndarray,
        bias: np.ndarray,
        multiplier: int,
        shift: int,
        logistic: np.ndarray,
        tanh: np.ndarray,
        path: int = PATH_BEST,
    ) -> None:
        """``weights`` [4·units, units + input_size] integers minus the weights' zero
        point, in the reference's packing (gates input, cell, forget, output; the
        columns multiply [input, previous output]); ``bias`` [4·units]; the gates'
        ``multiplier`` and ``shift``; ``logistic`` and ``tanh`` [65536] of every
        int16 value with 3 integer bits, as Q0.15."""
        rows, columns = weights.shape
        self.units = rows // 4
        self.input_size = columns - self.units
        if rows % 4 or self.input_size < 1 or bias.shape != (rows,):
            raise BadDataError(f"LSTM gate weights {weights.shape}, bias {bias.shape}")
        tables = []
        for table in (logistic, tanh):
            if table.shape != (65536,) or table.min() < _INT16[0] or table.max() > _INT16[1]:
                raise BadDataError("LSTM gate tables are 65536 int16 values")
            tables.append(np.ascontiguousarray(table, dtype=np.int16))
        self._tables = tuple(ffi.from_buffer("int16_t[]", t) for t in tables)
        self._keep = tables
        self._gates = QuantConv(
            (1, 1, columns),
            np.ascontiguousarray(weights.T),
            (1, 1),
            bias,
            (np.array([multiplier]), np.array([shift])),
            None,
            (np.uint8, 128),
            (np.int16, 0),
            _INT16,
            path,
        )
        fields = self._gates.plan_fields()
        self._fields = (fields["layer"], fields["packed"], fields["packed_bytes"])
        self._scratch = int(lib.nnb_qlstm16_scratch_bytes(fields["layer"]))
        if self._scratch < 0:
            raise _error(self._scratch, "quantized LSTM")
        self._path = path

    def __call__(
        self, x: np.ndarray, prev_out: np.ndarray, prev_cell: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(cell state int16, output uint8), each [batches, units], for ``x``
        [batches, input_size] and ``prev_out`` [batches, units] uint8 and
        ``prev_cell`` [batches, units] int16, all C-contiguous (checked: C trusts
        the sizes)."""
        batches = x.shape[0] if x.ndim == 2 else -1
        for value, dtype, width in (
            (x, np.uint8, self.input_size),
            (prev_out, np.uint8, self.units),
            (prev_cell, np.int16, self.units),
        ):
            if (
                type(value) is not np.ndarray
                or value.dtype != dtype
                or value.shape != (batches, width)
                or not value.flags.c_contiguous
            ):
                raise BadDataError(
                    f"quantized LSTM step of {self.input_size} inputs and {self.units} units "
                    f"got {value!r:.80}"
                )
        cell = np.empty((batches, self.units), np.int16)
        out = np.empty((batches, self.units), np.uint8)
        scratch = np.empty(-(-self._scratch // 2), np.int16)
        layer, packed, packed_bytes = self._fields
        logistic, tanh = self._tables
        rc = lib.nnb_qlstm16_run(
            layer, packed, packed_bytes, logistic, tanh,
            ffi.from_buffer("uint8_t[]", x), ffi.from_buffer("uint8_t[]", prev_out),
            ffi.from_buffer("int16_t[]", prev_cell), batches,
            ffi.from_buffer("int16_t[]", cell), ffi.from_buffer("uint8_t[]", out),
            ffi.from_buffer(scratch), scratch.nbytes, self._path,
        )  # fmt: skip
        if rc:
            raise _error(rc, "quantized LSTM")
        return cell, out
