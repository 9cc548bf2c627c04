"""The C loops of ``csrc/kernels.c``, called with numpy arrays.

Each wrapper checks what C cannot (dtypes, contiguity, that the arrays'
sizes agree) and hands the rest to C, which checks that every window lies
inside the (padded) input before it reads.  The convolutions pad with zeros
inside their loops (a depthwise input of under 16 channels is copied wider);
pools take an input their operation padded (with -inf or 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _bindings as c
from ..._bindings import OUT_TYPES, POOL_MAX, POOL_SUM, QUANT_ADD, QUANT_MUL
from ..._bindings import plan as c_plan
from .padding import bordered
from .window_geometry import Window2D

__all__ = [
    "POOL_MAX",
    "POOL_SUM",
    "QUANT_ADD",
    "QUANT_MUL",
    "TILE",
    "ConvLoop",
    "QuantBinary",
    "Requantizer",
    "add_padded_channels_f32",
    "conv_f32",
    "depthwise_conv_f32",
    "pool_f32",
    "quantize_f32",
    "requantize_f32",
    "softmax_quant8",
]

#: Output channels per vector in the C convolution: its weights have a
#: multiple of this many columns (zeros past the last channel).
TILE = 16


def _window_shape(
    in_shape: tuple[int, ...],
    filter_hw: tuple[int, int],
    win: Window2D,
    out_c: int,
    padded: bool = False,
) -> Any:
    """The C struct for an [N, H, W, C] input; ``padded``: C adds ``win``'s zero
    padding (otherwise its pads are 0: the input has them already)."""
    n, in_h, in_w, in_c = in_shape
    return c.window_shape(
        {
            "batches": n,
            "in_h": in_h,
            "in_w": in_w,
            "in_c": in_c,
            "filter_h": filter_hw[0],
            "filter_w": filter_hw[1],
            "stride_h": win.stride_h,
            "stride_w": win.stride_w,
            "dilation_h": win.dilation_h,
            "dilation_w": win.dilation_w,
            "pad_top": win.pad_top if padded else 0,
            "pad_bottom": win.pad_bottom if padded else 0,
            "pad_left": win.pad_left if padded else 0,
            "pad_right": win.pad_right if padded else 0,
            "out_h": win.out_h,
            "out_w": win.out_w,
            "out_c": out_c,
        },
    )


#: The C struct of a window, for the C plan (``cpu/plan.py``).
window_struct = _window_shape


class ConvLoop:
    """One of the C convolution loops (``nnb_conv_f32``, ``nnb_depthwise_conv_f32``)
    with everything but the input fixed: the input's shape, weights, bias,
    window and clamp.  A model's convolution builds one when it is prepared,
    so a run only checks the input and calls C (re-deriving the arguments
    at every call cost 10-15 us, several times the C loop of a small layer).

    Safe to call from several threads: calls share only read-only buffers.
    """

    __slots__ = (
        "in_shape",
        "out_shape",
        "_what",
        "_source_shape",
        "_inner",
        "_kernel",
        "plan_step",
    )

    def __init__(
        self,
        depthwise: bool,
        in_shape: tuple[int, ...],
        weights: np.ndarray,
        filter_hw: tuple[int, int],
        bias: np.ndarray,
        win: Window2D,
        lo: float = -np.inf,
        hi: float = np.inf,
        path: int = 0,
    ) -> None:
        """``weights``: [FH*FW*C, columns] (CONV_2D) or [FH, FW, columns]
        (depthwise), float32, with columns a multiple of :data:`TILE` (zeros
        past the last output channel); ``bias`` [depth_out]."""
        n, in_h, in_w, depth_in = in_shape
        depth_out = bias.shape[0]
        self.in_shape = tuple(in_shape)
        self.out_shape = (n, win.out_h, win.out_w, depth_out)
        self._inner: tuple[slice, ...] | None = None  # where the input goes in a wider copy
        self._source_shape: tuple[int, ...] = self.in_shape
        weights = np.ascontiguousarray(weights)
        columns = weights.shape[-1]
        if depthwise:
            if (
                weights.dtype != np.float32
                or weights.shape != (*filter_hw, columns)
                or columns < depth_in
                or columns % TILE
                or depth_out != depth_in
            ):
                raise ValueError(
                    f"depthwise weights {weights.shape} do not fit {depth_in} channels"
                )
            # C reads whole 16-channel tiles: a narrow input gets zero channels.
            self._what = "depthwise"
            if depth_in < TILE:
                self._source_shape = (n, in_h, in_w, TILE)
                self._inner = (slice(0, n), slice(0, in_h), slice(0, in_w), slice(0, depth_in))
            c_bias = np.zeros(columns, np.float32)
            c_bias[:depth_out] = bias
            shape = _window_shape(self._source_shape, filter_hw, win, depth_out, padded=True)
        else:
            if (
                weights.dtype != np.float32
                or weights.ndim != 2
                or weights.shape[0] != filter_hw[0] * filter_hw[1] * depth_in
                or columns < depth_out
                or columns % TILE
            ):
                raise ValueError(
                    f"conv weights {weights.shape} do not fit {depth_in} -> {depth_out}"
                )
            self._what = "conv"  # C pads as it reads
            c_bias = np.ascontiguousarray(bias, dtype=np.float32)
            shape = _window_shape(self.in_shape, filter_hw, win, depth_out, padded=True)
        invalid = f"window {win} does not fit the input {self.in_shape}"
        wide = int(np.prod(self._source_shape)) * 4 if self._inner is not None else 0
        #: the same loop as a step of the C plan (``cpu/plan.py``)
        self.plan_step = c_plan.KernelStep(
            c_plan.DEPTHWISE if depthwise else c_plan.CONV,
            c_plan.conv_params(shape, weights, c_bias, float(lo), float(hi), path, depth_in),
            scratch=wide,
        )
        self._kernel = c.ConvKernel(
            depthwise, shape, weights, c_bias, float(lo), float(hi), path, self._what, invalid
        )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The output for ``x``, a C-contiguous float32 array of ``in_shape``
        (checked here: C trusts the sizes fixed at creation)."""
        if not self.fits(x):
            raise ValueError(f"{self._what} prepared for {self.in_shape} float32, got {x!r:.80}")
        out = np.empty(self.out_shape, np.float32)
        if out.size == 0:
            return out
        source = x
        if self._inner is not None:
            source = bordered(self._source_shape, self._inner, 0, np.float32)
            source[self._inner] = x
        self._kernel(source, out)
        return out

    def fits(self, x: np.ndarray) -> bool:
        """Whether ``x`` is an input this loop can take as it is."""
        return (
            type(x) is np.ndarray
            and x.shape == self.in_shape
            and x.dtype == np.float32
            and x.flags.c_contiguous
        )


def conv_f32(
    x: np.ndarray,
    weights: np.ndarray,
    filter_hw: tuple[int, int],
    bias: np.ndarray,
    win: Window2D,
    lo: float = -np.inf,
    hi: float = np.inf,
    path: int = 0,
) -> np.ndarray:
    """CONV_2D: ``x`` [N, H, W, C] (unpadded: C reads zeros for ``win``'s
    padding), ``weights`` [FH*FW*C, columns] with columns a multiple of
    :data:`TILE`, ``bias`` [depth_out] -> [N, OH, OW, depth_out], clamped to
    [lo, hi].  ``path`` 0 runs the fastest loop this CPU has; tests pick each
    one (``_bindings.CONV_*``)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return ConvLoop(False, x.shape, weights, filter_hw, bias, win, lo, hi, path)(x)


def depthwise_conv_f32(
    x: np.ndarray,
    weights: np.ndarray,
    bias: np.ndarray,
    win: Window2D,
    lo: float = -np.inf,
    hi: float = np.inf,
    path: int = 0,
) -> np.ndarray:
    """DEPTHWISE_CONV_2D (depth multiplier 1): ``x`` [N, H, W, C] (unpadded:
    this pads it with zeros as ``win`` says), ``weights`` [FH, FW, columns]
    with columns a multiple of :data:`TILE` (zeros past C), ``bias`` [C] ->
    [N, OH, OW, C], clamped to [lo, hi].  ``path`` as for :func:`conv_f32`."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if weights.ndim != 3:
        raise ValueError(f"depthwise weights {weights.shape} do not fit {x.shape[-1]} channels")
    filter_hw = (weights.shape[0], weights.shape[1])
    return ConvLoop(True, x.shape, weights, filter_hw, bias, win, lo, hi, path)(x)


def pool_f32(
    padded: np.ndarray, filter_hw: tuple[int, int], win: Window2D, kind: int
) -> np.ndarray:
    """Max (:data:`POOL_MAX`, NaN-propagating as ``np.maximum``) or sum
    (:data:`POOL_SUM`) over each window: ``padded`` [N, H, W, C] -> [N, OH, OW, C]."""
    padded = np.ascontiguousarray(padded, dtype=np.float32)
    n, _, _, channels = padded.shape
    out = np.empty((n, win.out_h, win.out_w, channels), np.float32)
    if out.size == 0:
        return out
    c.pool_f32(padded, _window_shape(padded.shape, filter_hw, win, channels), kind, out, win)
    return out


def add_padded_channels_f32(a: np.ndarray, x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``clamp(a + x zero-padded after its last axis to a's, lo, hi)`` in one pass:
    PAD then ADD without the padded copy (see ``nnburst/cpu/fusion.py``)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if a.ndim == 0 or a.shape[:-1] != x.shape[:-1] or x.shape[-1] > a.shape[-1]:
        raise _unpaddable(a, x)
    out = np.empty_like(a)
    if out.size:
        c.add_padded_channels_f32(a, x, lo, hi, out)
    return out


def _unpaddable(a: np.ndarray, x: np.ndarray) -> ValueError:
    return ValueError(f"cannot add {x.shape} padded on its last axis to {a.shape}")


class Requantizer:
    """A quantized layer's output from its float32 sums [..., C] (exact
    integers) in one C pass (``nnb_requantize_f32``): ``bias`` [C] added,
    NNAPI's fixed-point requantization (``multipliers`` and ``shifts``: one
    per channel, or one), ``zero_point`` added, clamped to ``bounds``, as
    uint8 or int8 ``dtype``.  The same integers as
    ``common.multiply_by_quantized_multipliers``, in a fraction of the time
    (numpy's int64 passes took 70% of an int8 CNN's run).  Built once per
    prepared layer, so a run passes C only the sums and the output."""

    __slots__ = ("channels", "dtype", "_requantize")

    def __init__(
        self,
        channels: int,
        bias: np.ndarray,
        multipliers: np.ndarray,
        shifts: np.ndarray,
        zero_point: int,
        bounds: tuple[int, int],
        dtype: Any,
    ) -> None:
        self.channels, self.dtype = channels, np.dtype(dtype)
        bias = np.ascontiguousarray(np.broadcast_to(bias, (channels,)), dtype=np.int64)
        multipliers = np.ascontiguousarray(multipliers, dtype=np.int64).reshape(-1)
        shifts = np.ascontiguousarray(shifts, dtype=np.int64).reshape(-1)
        if multipliers.size != shifts.size or multipliers.size not in (1, channels):
            raise ValueError(
                f"{multipliers.size} multipliers and {shifts.size} shifts for {channels} channels"
            )
        if self.dtype not in OUT_TYPES or shifts.min() < -31 or shifts.max() > 30:
            raise ValueError(f"cannot requantize to {self.dtype} with shifts {shifts}")
        self._requantize = c.Requantize(bias, multipliers, shifts, zero_point, bounds, self.dtype)

    def __call__(self, acc: np.ndarray) -> np.ndarray:
        """``acc``: C-contiguous float32 sums whose last axis has ``channels``."""
        if (
            acc.dtype != np.float32
            or not acc.flags.c_contiguous
            or (acc.shape[-1] if acc.ndim else 1) != self.channels
        ):
            raise ValueError(f"cannot requantize {acc.dtype} sums of shape {acc.shape}")
        out = np.empty(acc.shape, self.dtype)
        if out.size == 0:
            return out
        self._requantize(acc, self.channels, out)
        return out


def requantize_f32(
    acc: np.ndarray,
    bias: np.ndarray,
    multipliers: np.ndarray,
    shifts: np.ndarray,
    zero_point: int,
    bounds: tuple[int, int],
    dtype: Any,
) -> np.ndarray:
    """:class:`Requantizer` for one call: ``acc`` [..., C] -> uint8 or int8."""
    acc = np.ascontiguousarray(acc, dtype=np.float32)
    channels = acc.shape[-1] if acc.ndim else 1
    return Requantizer(channels, bias, multipliers, shifts, zero_point, bounds, dtype)(acc)


class QuantBinary:
    """Quantized ADD/SUB (``QUANT_ADD``, SUB with the second input's multiplier
    negated) or MUL (``QUANT_MUL``) on 8-bit tensors: the output for each of
    the 65536 pairs of input bytes, computed once by NNAPI's integer steps
    (``nnb_quant_binary_table``), then one lookup per element
    (``nnb_quant_binary_lookup``).  A model's operation builds one when it is
    prepared (0.2 ms); a run checks the arrays and calls C.  Bit-exact with the
    numpy steps of ``elementwise.py``, which took 0.7 ms an ADD of 16K elements.

    Safe to call from several threads: calls only read the table.
    """

    __slots__ = ("dtype", "_table", "_swapped")

    def __init__(
        self,
        kind: int,
        dtype: Any,
        zero_points: tuple[int, int],
        out_zero_point: int,
        multiplier: tuple[int, int],
        bounds: tuple[int, int],
        left_shift: int = 0,
        input_multipliers: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0)),
    ) -> None:
        """``multiplier``: the output's (ADD) or the product's (MUL) (significand,
        shift); ``input_multipliers`` the inputs' (ADD).  ValueError for
        parameters C refuses (a shift outside [-31, 30], say): the caller
        then keeps the numpy steps."""
        self.dtype = np.dtype(dtype)
        (za, zb), ((ma, sa), (mb, sb)) = zero_points, input_multipliers
        fields = {
            "kind": kind,
            "type": OUT_TYPES.get(self.dtype, 0),
            "zero_point_a": za,
            "zero_point_b": zb,
            "zero_point_out": out_zero_point,
            "left_shift": left_shift,
            "multiplier_a": ma,
            "shift_a": sa,
            "multiplier_b": mb,
            "shift_b": sb,
            "multiplier": multiplier[0],
            "shift": multiplier[1],
            "lo": bounds[0],
            "hi": bounds[1],
        }
        self._table = np.empty((256, 256), np.uint8)  # [a byte, b byte]
        c.quant_binary_table(fields, self._table)
        # Every step is symmetric in a and b but for their parameters: the
        # transposed table serves a broadcast first input as the repeating one.
        self._swapped = np.ascontiguousarray(self._table.T)
        self._table.flags.writeable = self._swapped.flags.writeable = False

    @property
    def table(self) -> np.ndarray:
        """[256, 256] uint8: the output byte for each (a byte, b byte), read-only."""
        return self._table

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a op b`` with numpy's broadcasting (the shapes must broadcast)."""
        if a.dtype != self.dtype or b.dtype != self.dtype:
            raise ValueError(f"quantized arithmetic on {self.dtype}, got {a.dtype} and {b.dtype}")
        table = self._table
        if a.shape == b.shape:
            shape = a.shape
        else:
            shape = np.broadcast_shapes(a.shape, b.shape)
            if a.shape != shape or not _repeats_along(b.shape, shape):
                if b.shape == shape and _repeats_along(a.shape, shape):
                    a, b, table = b, a, self._swapped
                else:  # a general broadcast: copies (8-bit, cheap) of the full shape
                    a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        out = np.empty(shape, self.dtype)
        if out.size == 0:
            return out
        c.quant_binary_lookup(a, b, table, out)
        return out


def _repeats_along(small: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether an array of shape ``small``, read over and over, is its broadcast
    to ``shape`` (C-order): its shape without leading 1s is ``shape``'s tail."""
    dims = list(small)
    while dims and dims[0] == 1:
        dims.pop(0)
    return not dims or tuple(dims) == shape[len(shape) - len(dims) :]


def softmax_quant8(x: np.ndarray, exps: np.ndarray, radius: int) -> np.ndarray:
    """Quantized SOFTMAX over the last axis of 8-bit ``x`` in one C pass
    (``nnb_softmax_quant8``): ``exps`` [256] int32 holds exp(-k steps * beta)
    in Q0.31 for every difference k from a row's maximum, and an element more
    than ``radius`` steps below it comes out as the type's minimum."""
    x = np.ascontiguousarray(x)
    exps = np.ascontiguousarray(exps, dtype=np.int32)
    if exps.shape != (256,) or x.ndim == 0 or x.dtype not in OUT_TYPES:
        raise ValueError(f"softmax of {x.dtype} {x.shape} with {exps.shape} exponentials")
    out = np.empty(x.shape, x.dtype)
    if out.size == 0:
        return out
    c.softmax_quant8(x, exps, radius, out)
    return out


def quantize_f32(x: np.ndarray, scale: float, zero_point: int, dtype: Any) -> np.ndarray:
    """QUANTIZE: ``clamp(round_half_away(x / scale) + zero_point)`` in float32 (NaN
    to the top of the range) to uint8 or int8 ``dtype``, in one C pass instead
    of numpy's dozen."""
    dtype = np.dtype(dtype)
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype)
    if out.size:
        c.quantize_f32(x, scale, zero_point, out)
    return out
