"""Graph rewrites the CPU driver makes at prepare time, before any kernel is bound.

Importers and NDK apps hand the driver graphs written for clarity, not
speed: an ONNX batch norm after a convolution is a MUL and an ADD over the
whole feature map, a hard-swish is four operations, a ReLU is its own
pass.  PP-OCR's direction classifier came to 296 operations for 42
convolutions, and each operation costs the Python executor 10-17 µs before
it computes anything.  Here such patterns become fewer operations that
compute the same values:

* **folding**: a MUL, ADD or SUB by a per-output-channel (or scalar)
  constant right after a float CONV_2D, DEPTHWISE_CONV_2D or
  FULLY_CONNECTED without activation goes into its weights and bias, and
  its fused activation becomes the layer's;
* **activations**: a RELU, RELU1 or RELU6 operation, or a MAXIMUM or
  MINIMUM with a constant bound, after an operation with a fused activation
  narrows that activation when the result is one NNAPI has; MIN(MAX(x, lo),
  hi) with NNAPI's bounds is one RELU1/RELU6; MAX(x, 0) is RELU;
  MAX(x, a*x) with 0 <= a <= 1 is PRELU (leaky ReLU); x * RELU6(x + 3) / 6
  is HARD_SWISH;
* **squares**: POW(x, 2) is MUL(x, x) (powf's square rounds as the product:
  the same bits, and a C plan step);
* **padding**: a PAD of zeros around the rows and columns of an NHWC
  float tensor that only a CONV_2D or DEPTHWISE_CONV_2D reads becomes that
  layer's own (explicit) padding: the padded copy is never made (MediaPipe's
  pose_detection pads before each strided layer, 1.6 ms of copies and fills
  in 20);
* **identities**: a RESHAPE to its input's own shape, a CAST to its input's
  type, and adding 0 or multiplying by 1 disappear;
* **constants**: an operation whose inputs are all constants runs once,
  here, and its outputs become constants;
* **layout**: last, an NCHW graph's windows compute NHWC and its transposes
  move to the borders of the region (:mod:`.layout`).

Every rewrite needs the intermediate it removes to be read by nothing else
and not to be a subgraph output, float32 data, and static shapes, so the
result is the same tensor: exactly, or within rounding when weights are
scaled (folding).  The input graph is left untouched; the driver validates
it first, so a rewrite never hides an invalid operation, and validates the
rewritten one again.  ``NNBURST_VLOG=compilation`` logs what was rewritten.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import numpy as np

from ..codes import FuseCode, OperandCode, OperationCode
from ..errors import NNError
from ..hal.model import Lifetime, Operand, Operation, Subgraph
from ..operands import SCALAR_CODES, OperandInfo
from .layout import nhwc_regions
from .ops.fused_activation import FLOAT_ACTIVATION_BOUNDS
from .ops.window_geometry import resolve_window, window_args, window_values
from .registry import ExecutionContext, OperationSignature, lookup

logger = logging.getLogger("nnburst.compilation.optimise")

#: ``NNBURST_GRAPH_OPTIMISER=0`` runs graphs as written (to compare, or to debug a rewrite).
ENABLED = os.environ.get("NNBURST_GRAPH_OPTIMISER", "1") != "0"

_F32 = OperandCode.TENSOR_FLOAT32
_CONSTANT = (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)
_FUSE_BY_BOUNDS = {bounds: code for code, bounds in FLOAT_ACTIVATION_BOUNDS.items()}
_RELU_OPERATIONS = {
    OperationCode.RELU: FuseCode.RELU,
    OperationCode.RELU1: FuseCode.RELU1,
    OperationCode.RELU6: FuseCode.RELU6,
}
_LAYERS = (OperationCode.CONV_2D, OperationCode.DEPTHWISE_CONV_2D, OperationCode.FULLY_CONNECTED)
_ARITHMETIC = (OperationCode.ADD, OperationCode.MUL, OperationCode.SUB, OperationCode.DIV)
#: Never run at prepare time: control flow, and an operation drawing random numbers.
_NOT_FOLDED = (OperationCode.IF, OperationCode.WHILE, OperationCode.RANDOM_MULTINOMIAL)
#: Constant results larger than this stay computed per run (memory over time).
MAX_FOLDED_BYTES = 16 << 20


class _Graph:
    """A subgraph being rewritten: operations by position (None once removed)."""

    def __init__(self, subgraph: Subgraph) -> None:
        self.operands = list(subgraph.operands)
        self.operations: list[Operation | None] = list(subgraph.operations)
        self.inputs = subgraph.input_indexes
        self.outputs = set(subgraph.output_indexes)
        self.rewrites: list[str] = []
        #: each operation's place in the rewritten order: an added one sorts
        #: right after the operation it was added behind (see :meth:`add_after`)
        self.keys: list[tuple[int, ...]] = [(p,) for p in range(len(self.operations))]
        self._added = 0
        #: operand -> positions of the operations reading it, and of the one writing it
        self.readers: dict[int, list[int]] = {}
        self.writer: dict[int, int] = {}
        for position in range(len(self.operations)):
            self._index(position)

    def _index(self, position: int) -> None:
        op = self.operations[position]
        if op is not None:
            for i in op.inputs:
                self.readers.setdefault(i, []).append(position)
            for i in op.outputs:
                self.writer[i] = position

    def _unindex(self, position: int) -> None:
        op = self.operations[position]
        if op is not None:
            for i in op.inputs:
                self.readers[i].remove(position)
            for i in op.outputs:
                del self.writer[i]

    def set(self, position: int, op: Operation | None) -> None:
        """Operation ``position`` becomes ``op`` (None: removed)."""
        self._unindex(position)
        self.operations[position] = op
        self._index(position)

    def add_after(self, position: int, op: Operation) -> int:
        """``op`` added to the graph, ordered right after operation ``position``."""
        self._added += 1
        self.operations.append(op)
        self.keys.append((*self.keys[position], self._added))
        self._index(len(self.operations) - 1)
        return len(self.operations) - 1

    def subgraph(self, original: Subgraph) -> Subgraph:
        order = sorted(range(len(self.operations)), key=self.keys.__getitem__)
        return dataclasses.replace(
            original,
            operands=self.operands,
            operations=[op for op in (self.operations[p] for p in order) if op is not None],
        )

    # -- questions about operands -------------------------------------------------
    def constant(self, index: int) -> np.ndarray | None:
        operand = self.operands[index]
        return operand.value if operand.lifetime in _CONSTANT else None

    def scalar(self, index: int) -> Any:
        value = self.constant(index)
        return None if value is None or value.size != 1 else value.item()

    def info(self, index: int) -> OperandInfo:
        return self.operands[index].info

    def static_f32(self, index: int) -> bool:
        info = self.info(index)
        return info.code == _F32 and info.is_fully_specified

    def private(self, index: int, reader: int) -> bool:
        """Whether ``index`` is a temporary that operation ``reader`` alone reads."""
        return (
            self.operands[index].lifetime == Lifetime.TEMPORARY_VARIABLE
            and index not in self.outputs
            and self.readers.get(index, []) == [reader]
        )

    def signature(self, op: Operation) -> OperationSignature:
        return _signature(self, op)

    def producer(self, index: int) -> tuple[int, Operation] | None:
        position = self.writer.get(index)
        if position is None:
            return None
        op = self.operations[position]
        return None if op is None else (position, op)

    # -- changes ------------------------------------------------------------------
    def add_constant(self, value: np.ndarray, code: OperandCode = _F32) -> int:
        info = OperandInfo(code, () if code in SCALAR_CODES else tuple(value.shape))
        self.operands.append(Operand(info, Lifetime.CONSTANT_COPY, value))
        return len(self.operands) - 1

    def fuse_constant(self, code: int) -> int:
        return self.add_constant(np.array(code, np.int32), OperandCode.INT32)

    def replace(
        self, position: int, op: Operation | None, removed: tuple[int, ...], note: str
    ) -> None:
        """Operation ``position`` becomes ``op`` (None: removed), those at ``removed`` go."""
        for gone in removed:
            self.set(gone, None)
        self.set(position, op)
        self.rewrites.append(note)


def optimise(subgraph: Subgraph) -> Subgraph:
    """``subgraph`` with the rewrites above made, or itself when none applies
    (or when ``NNBURST_GRAPH_OPTIMISER=0``).  The subgraph must have validated."""
    if not ENABLED or not subgraph.operations:
        return subgraph
    graph = _Graph(subgraph)
    passes = (
        _fold_constants,
        _drop_identity,
        _square,
        _hard_swish,
        _leaky_relu,
        _clamp,
        _fold_into_layer,
        _pad_into_layer,
    )
    changed = True
    while changed:  # each rewrite removes an operation, so this ends
        changed = False
        for position in range(len(graph.operations)):
            if graph.operations[position] is None:
                continue
            for rewrite in passes:
                if rewrite(graph, position):
                    changed = True
                    break
    result = graph.subgraph(subgraph) if graph.rewrites else subgraph
    relaid = _Graph(result)
    if nhwc_regions(relaid):
        graph.rewrites += relaid.rewrites
        result = relaid.subgraph(result)
    if not graph.rewrites:
        return subgraph
    before, after = len(subgraph.operations), len(result.operations)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "graph optimiser: %d operations -> %d:\n  %s",
            before,
            after,
            "\n  ".join(graph.rewrites),
        )
    return result


# -- fused activations --------------------------------------------------------------


def _fuse_position(graph: _Graph, op: Operation) -> int | None:
    """Where ``op`` takes its fused activation, for the float operations that have one."""
    if op.code in _ARITHMETIC:
        return 2
    if op.code == OperationCode.FULLY_CONNECTED:
        return 3
    if op.code in (OperationCode.CONV_2D, OperationCode.DEPTHWISE_CONV_2D):
        extras = ("depth_multiplier",) if op.code == OperationCode.DEPTHWISE_CONV_2D else ()
        signature = _signature(graph, op)
        return window_args(signature, 3, extras, dilation=True).positions["fuse"]
    return None


def _activation(graph: _Graph, op: Operation) -> tuple[int, tuple[float, float]] | None:
    """(input position, bounds) of ``op``'s constant fused activation, when it has one."""
    position = _fuse_position(graph, op)
    if position is None or len(op.inputs) <= position:
        return None
    code = graph.scalar(op.inputs[position])
    if code not in FLOAT_ACTIVATION_BOUNDS:
        return None
    return position, FLOAT_ACTIVATION_BOUNDS[code]


def _narrow_producer(
    graph: _Graph, position: int, source: int, bounds: tuple[float, float], what: str
) -> bool:
    """Clamp ``source`` to ``bounds`` in its producer's fused activation, in place
    of operation ``position`` (which reads ``source`` and writes the clamp)."""
    op = graph.operations[position]
    found = graph.producer(source)
    if op is None or found is None or not graph.private(source, position):
        return False
    producer_position, producer = found
    activation = _activation(graph, producer)
    if activation is None or not graph.static_f32(source):
        return False
    if (
        len(producer.outputs) != 1
        or not graph.static_f32(op.outputs[0])
        or graph.info(op.outputs[0]).dimensions != graph.info(source).dimensions
    ):
        return False
    fuse_position, (lo, hi) = activation
    narrowed = (max(lo, bounds[0]), min(hi, bounds[1]))
    code = _FUSE_BY_BOUNDS.get(narrowed)
    if code is None:
        return False
    inputs = list(producer.inputs)
    inputs[fuse_position] = graph.fuse_constant(code)
    graph.replace(
        producer_position,
        Operation(producer.code, tuple(inputs), op.outputs),
        (position,),
        f"{what} fused into {producer.code.name} as {FuseCode(code).name}",
    )
    return True


def _uniform_constant(graph: _Graph, op: Operation) -> tuple[int, float] | None:
    """(the other input, c) for a two-input operation one of whose inputs is a
    float32 constant holding c everywhere that leaves the other's shape as it is."""
    if len(op.inputs) < 2 or len(op.outputs) != 1:
        return None
    for side in (0, 1):
        value = graph.constant(op.inputs[side])
        other = op.inputs[1 - side]
        if (
            value is not None
            and value.dtype == np.float32
            and value.size >= 1
            and graph.constant(other) is None
            and graph.static_f32(other)
            and graph.info(op.outputs[0]).dimensions == graph.info(other).dimensions
            and value.ndim <= len(graph.info(other).dimensions or ())
            and np.all(value == value.flat[0])
        ):
            return other, float(value.flat[0])
    return None


def _clamp_of(graph: _Graph, op: Operation) -> tuple[int, tuple[float, float]] | None:
    """(x, bounds) when ``op`` clamps float32 x: a RELU, RELU1 or RELU6, or a MAXIMUM
    or MINIMUM with a constant bound."""
    if op.code in _RELU_OPERATIONS:
        if not graph.static_f32(op.inputs[0]) or not graph.static_f32(op.outputs[0]):
            return None
        return op.inputs[0], FLOAT_ACTIVATION_BOUNDS[_RELU_OPERATIONS[op.code]]
    if op.code not in (OperationCode.MAXIMUM, OperationCode.MINIMUM):
        return None
    found = _uniform_constant(graph, op)
    if found is None or not graph.static_f32(op.outputs[0]):
        return None
    x, c = found
    return x, ((c, np.inf) if op.code == OperationCode.MAXIMUM else (-np.inf, c))


_RELU_BY_FUSE: dict[int, OperationCode] = {fuse: code for code, fuse in _RELU_OPERATIONS.items()}


def _clamp(graph: _Graph, position: int) -> bool:
    """A clamp (:func:`_clamp_of`) into its producer's fused activation; two
    clamps in a row, or a MAXIMUM(x, 0), as the one RELU, RELU1 or RELU6 they make."""
    op = graph.operations[position]
    assert op is not None
    found = _clamp_of(graph, op)
    if found is None:
        return False
    source, bounds = found
    what = op.code.name if op.code in _RELU_OPERATIONS else f"{op.code.name}(x, c)"
    if _narrow_producer(graph, position, source, bounds, what):
        return True
    inner = graph.producer(source)
    if inner is not None and graph.private(source, position):
        inner_position, inner_op = inner
        inner_found = _clamp_of(graph, inner_op)
        if inner_found is not None:
            x, (lo, hi) = inner_found
            code = _FUSE_BY_BOUNDS.get((max(lo, bounds[0]), min(hi, bounds[1])))
            if code in _RELU_BY_FUSE:
                relu = _RELU_BY_FUSE[code]
                graph.replace(
                    position,
                    Operation(relu, (x,), op.outputs),
                    (inner_position,),
                    f"{inner_op.code.name} then {op.code.name} as {relu.name}",
                )
                return True
    code = _FUSE_BY_BOUNDS.get(bounds)
    if op.code in (OperationCode.MAXIMUM, OperationCode.MINIMUM) and code in _RELU_BY_FUSE:
        relu = _RELU_BY_FUSE[code]
        graph.replace(
            position, Operation(relu, (source,), op.outputs), (), f"{what} as {relu.name}"
        )
        return True
    return False


def _leaky_relu(graph: _Graph, position: int) -> bool:
    """MAXIMUM(x, MUL(x, a)) with a constant 0 <= a <= 1 is PRELU(x, a): both give
    x where x >= 0 and a*x elsewhere, the same product."""
    op = graph.operations[position]
    assert op is not None
    if op.code != OperationCode.MAXIMUM or len(op.inputs) != 2:
        return False
    for side in (0, 1):
        x, scaled = op.inputs[side], op.inputs[1 - side]
        found = graph.producer(scaled)
        if found is None or not graph.private(scaled, position):
            continue
        mul_position, mul = found
        if mul.code != OperationCode.MUL or graph.scalar(mul.inputs[2]) != FuseCode.NONE:
            continue
        if x not in mul.inputs[:2] or mul.inputs[0] == mul.inputs[1]:
            continue
        alpha = mul.inputs[1] if mul.inputs[0] == x else mul.inputs[0]
        value = graph.constant(alpha)
        if (
            value is None
            or value.dtype != np.float32
            or not np.all((value >= 0) & (value <= 1))
            or not graph.static_f32(x)
            or graph.info(scaled).dimensions != graph.info(x).dimensions
            or graph.info(op.outputs[0]).dimensions != graph.info(x).dimensions
        ):
            continue
        graph.replace(
            position,
            Operation(OperationCode.PRELU, (x, alpha), op.outputs),
            (mul_position,),
            "MAXIMUM(x, MUL(x, a)) as PRELU",
        )
        return True
    return False


def _hard_swish(graph: _Graph, position: int) -> bool:
    """x * RELU6(x + 3) / 6 (DIV by 6 or MUL by 1/6 last) as HARD_SWISH."""
    op = graph.operations[position]
    assert op is not None
    found = (
        _uniform_constant(graph, op) if op.code in (OperationCode.DIV, OperationCode.MUL) else None
    )
    if found is None or graph.scalar(op.inputs[2]) != FuseCode.NONE:
        return False
    product, c = found
    if op.code == OperationCode.DIV and (c != 6.0 or op.inputs[0] != product):
        return False
    if op.code == OperationCode.MUL and not np.isclose(c, 1 / 6, rtol=1e-6, atol=0):
        return False
    mul = graph.producer(product)
    if mul is None or not graph.private(product, position):
        return False
    mul_position, mul_op = mul
    if mul_op.code != OperationCode.MUL or graph.scalar(mul_op.inputs[2]) != FuseCode.NONE:
        return False
    for side in (0, 1):
        x, relu6 = mul_op.inputs[side], mul_op.inputs[1 - side]
        removed = _relu6_of_x_plus_3(graph, relu6, x, mul_position)
        if removed is None or not graph.static_f32(x):
            continue
        if not (
            graph.info(x).dimensions
            == graph.info(product).dimensions
            == graph.info(op.outputs[0]).dimensions
        ):
            continue
        graph.replace(
            position,
            Operation(OperationCode.HARD_SWISH, (x,), op.outputs),
            (mul_position, *removed),
            f"x * RELU6(x + 3) / 6 ({len(removed) + 2} operations) as HARD_SWISH",
        )
        return True
    return False


def _relu6_of_x_plus_3(graph: _Graph, value: int, x: int, reader: int) -> tuple[int, ...] | None:
    """The positions of the operations computing ``value`` = RELU6(x + 3) for
    ``reader`` alone (an ADD then RELU6, or an ADD with RELU6 fused), or None."""
    if not graph.private(value, reader):
        return None
    found = graph.producer(value)
    if found is None:
        return None
    position, op = found
    removed: tuple[int, ...] = (position,)
    if op.code == OperationCode.RELU6:
        added = op.inputs[0]
        inner = graph.producer(added)
        if inner is None or not graph.private(added, position):
            return None
        add_position, add = inner
        fuse = FuseCode.NONE
        removed += (add_position,)
    else:
        add, fuse = op, FuseCode.RELU6
    if add.code != OperationCode.ADD or graph.scalar(add.inputs[2]) != fuse:
        return None
    three = _uniform_constant(graph, add)
    if three is None or three != (x, 3.0):
        return None
    return removed


# -- folding scale and shift into a layer -------------------------------------------


def _fold_into_layer(graph: _Graph, position: int) -> bool:
    """MUL/ADD/SUB of a per-output-channel constant after a float CONV_2D,
    DEPTHWISE_CONV_2D or FULLY_CONNECTED without activation, into its weights and bias."""
    op = graph.operations[position]
    assert op is not None
    if op.code not in (OperationCode.MUL, OperationCode.ADD, OperationCode.SUB):
        return False
    if len(op.inputs) != 3 or graph.scalar(op.inputs[2]) not in FLOAT_ACTIVATION_BOUNDS:
        return False
    for side in (0,) if op.code == OperationCode.SUB else (0, 1):
        source, constant = op.inputs[side], op.inputs[1 - side]
        found = graph.producer(source)
        if found is None or not graph.private(source, position):
            continue
        layer_position, layer = found
        folded = _folded_layer(graph, layer, op, source, constant)
        if folded is None:
            continue
        graph.replace(
            layer_position,
            folded,
            (position,),
            f"{op.code.name} by a constant folded into {layer.code.name}'s weights and bias",
        )
        return True
    return False


def _folded_layer(
    graph: _Graph, layer: Operation, op: Operation, source: int, constant: int
) -> Operation | None:
    """``layer`` computing ``op``'s output, or None if the fold does not apply."""
    value = graph.constant(constant)
    if (
        layer.code not in _LAYERS
        or value is None
        or value.dtype != np.float32
        or not np.all(np.isfinite(value))
        or len(layer.outputs) != 1
        or not graph.static_f32(source)
        or graph.info(op.outputs[0]).dimensions != graph.info(source).dimensions
        or graph.info(op.outputs[0]).code != _F32
    ):
        return None
    activation = _activation(graph, layer)
    weights, bias = graph.constant(layer.inputs[1]), graph.constant(layer.inputs[2])
    if (
        activation is None
        or activation[1] != FLOAT_ACTIVATION_BOUNDS[FuseCode.NONE]
        or weights is None
        or bias is None
        or graph.info(layer.inputs[0]).code != _F32
        or weights.dtype != np.float32
        or bias.dtype != np.float32
    ):
        return None
    shape = graph.info(source).dimensions
    assert shape is not None
    channel_axis = len(shape) - 1
    if layer.code != OperationCode.FULLY_CONNECTED and _nchw(graph, layer):
        channel_axis = 1
    channels = shape[channel_axis]
    per_channel = _per_channel(value, shape, channel_axis)
    if per_channel is None or bias.shape != (channels,):
        return None
    per_channel = per_channel.astype(np.float64)
    if op.code == OperationCode.MUL:
        if layer.code == OperationCode.DEPTHWISE_CONV_2D:  # [1, fh, fw, channels]
            new_weights = weights * per_channel
        else:  # CONV_2D [channels, fh, fw, depth_in]; FULLY_CONNECTED [channels, depth_in]
            new_weights = weights * per_channel.reshape((-1,) + (1,) * (weights.ndim - 1))
        new_bias = bias * per_channel
    else:
        new_weights = weights
        new_bias = bias + per_channel if op.code == OperationCode.ADD else bias - per_channel
    inputs = list(layer.inputs)
    if new_weights is not weights:
        inputs[1] = graph.add_constant(new_weights.astype(np.float32))
    inputs[2] = graph.add_constant(new_bias.astype(np.float32))
    inputs[activation[0]] = op.inputs[2]  # the MUL/ADD/SUB's own activation
    return Operation(layer.code, tuple(inputs), op.outputs)


def _pad_into_layer(graph: _Graph, position: int) -> bool:
    """A PAD of zeros around rows and columns, read by an NHWC float CONV_2D or
    DEPTHWISE_CONV_2D alone, into the layer's explicit padding: a padding tap
    reads zero either way, so the sums are the same (finite weights)."""
    op = graph.operations[position]
    assert op is not None
    if op.code not in (OperationCode.CONV_2D, OperationCode.DEPTHWISE_CONV_2D):
        return False
    source = op.inputs[0]
    found = graph.producer(source)
    if found is None or not graph.private(source, position):
        return False
    pad_position, pad = found
    paddings = graph.constant(pad.inputs[1]) if len(pad.inputs) == 2 else None
    weights = graph.constant(op.inputs[1])
    if (
        pad.code != OperationCode.PAD
        or paddings is None
        or paddings.shape != (4, 2)
        or (paddings < 0).any()
        or paddings[0].any()
        or paddings[3].any()
        or not graph.static_f32(pad.inputs[0])
        or not graph.static_f32(source)
        or weights is None
        or weights.ndim != 4
        or weights.dtype != np.float32
        or not np.all(np.isfinite(weights))
    ):
        return False
    extras = ("depth_multiplier",) if op.code == OperationCode.DEPTHWISE_CONV_2D else ()
    try:
        args = window_args(_signature(graph, op), 3, extras, dilation=True)
        values = window_values(args, lambda index: graph.scalar(op.inputs[index]))
        if any(v is None for v in values.values()) or values["nchw"]:
            return False
        _, in_h, in_w, _ = graph.info(source).dimensions or ()
        win = resolve_window(values, in_h, in_w, weights.shape[1], weights.shape[2], ValueError)
    except (NNError, ValueError, TypeError):
        return False
    pads = (
        win.pad_left + int(paddings[2, 0]),
        win.pad_right + int(paddings[2, 1]),
        win.pad_top + int(paddings[1, 0]),
        win.pad_bottom + int(paddings[1, 1]),
    )
    at = args.positions
    kept = ["stride_w", "stride_h", *extras, "fuse", "nchw", "dilation_w", "dilation_h"]
    inputs = [pad.inputs[0], op.inputs[1], op.inputs[2]]
    inputs += [graph.add_constant(np.array(p, np.int32), OperandCode.INT32) for p in pads]
    inputs += [op.inputs[at[name]] for name in kept if name in at]
    graph.replace(
        position,
        Operation(op.code, tuple(inputs), op.outputs),
        (pad_position,),
        f"PAD {paddings[1:3].tolist()} folded into {op.code.name}'s padding",
    )
    return True


def _nchw(graph: _Graph, layer: Operation) -> bool:
    extras = ("depth_multiplier",) if layer.code == OperationCode.DEPTHWISE_CONV_2D else ()
    position = window_args(_signature(graph, layer), 3, extras, dilation=True).positions.get("nchw")
    return position is not None and bool(graph.scalar(layer.inputs[position]))


def _per_channel(value: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """``value`` as one number per channel along ``axis`` of ``shape``, when it
    broadcasts to ``shape`` varying along that axis only; otherwise None."""
    if value.ndim > len(shape):
        return None
    padded = (1,) * (len(shape) - value.ndim) + value.shape
    if any(size != 1 for i, size in enumerate(padded) if i != axis):
        return None
    if padded[axis] not in (1, shape[axis]):
        return None
    return np.broadcast_to(value.reshape(-1), (shape[axis],))


# -- identities and constants -------------------------------------------------------


def _drop_identity(graph: _Graph, position: int) -> bool:
    """A RESHAPE to the same shape, a CAST to the same type, x + 0, x - 0, x * 1 or
    x / 1 without activation: its readers read its input instead."""
    op = graph.operations[position]
    assert op is not None
    if len(op.outputs) != 1:
        return False
    out = op.outputs[0]
    source: int | None = None
    if op.code in (OperationCode.RESHAPE, OperationCode.CAST):
        x = op.inputs[0]
        a, b = graph.info(x), graph.info(out)
        if (
            a.is_fully_specified
            and a.dimensions == b.dimensions
            and (a.code, a.scale, a.zero_point)
            == (
                b.code,
                b.scale,
                b.zero_point,
            )
            and a.channel_quant is None
        ):
            source = x
    elif op.code in _ARITHMETIC and graph.scalar(op.inputs[2]) == FuseCode.NONE:
        found = _uniform_constant(graph, op)
        neutral = 1.0 if op.code in (OperationCode.MUL, OperationCode.DIV) else 0.0
        if (
            found is not None
            and found[1] == neutral
            and (op.code in (OperationCode.ADD, OperationCode.MUL) or op.inputs[0] == found[0])
        ):
            source = found[0]
    if (
        source is None
        or out in graph.outputs
        or graph.operands[out].lifetime != Lifetime.TEMPORARY_VARIABLE
    ):
        return False
    for reader in list(graph.readers.get(out, [])):
        reading = graph.operations[reader]
        assert reading is not None
        inputs = tuple(source if i == out else i for i in reading.inputs)
        graph.set(reader, Operation(reading.code, inputs, reading.outputs))
    graph.replace(position, None, (), f"{op.code.name} as an identity dropped")
    return True


def _square(graph: _Graph, position: int) -> bool:
    """POW(x, c) with c 2 everywhere, leaving x's shape as it is: MUL(x, x)."""
    op = graph.operations[position]
    assert op is not None
    if op.code != OperationCode.POW or len(op.inputs) != 2 or op.inputs[1] == op.inputs[0]:
        return False
    found = _uniform_constant(graph, op)
    if found is None or found != (op.inputs[0], 2.0):
        return False
    x = op.inputs[0]
    graph.replace(
        position,
        Operation(OperationCode.MUL, (x, x, graph.fuse_constant(FuseCode.NONE)), op.outputs),
        (),
        "POW(x, 2) as MUL(x, x)",
    )
    return True


def _fold_constants(graph: _Graph, position: int) -> bool:
    """An operation reading only constants, run now: its outputs become constants."""
    op = graph.operations[position]
    assert op is not None
    if op.code in _NOT_FOLDED or any(
        graph.operands[i].lifetime not in (*_CONSTANT, Lifetime.NO_VALUE) for i in op.inputs
    ):
        return False
    if any(
        i in graph.outputs or graph.operands[i].lifetime != Lifetime.TEMPORARY_VARIABLE
        for i in op.outputs
    ):
        return False
    results = _run_once(graph, op)
    if results is None:
        return False
    for index, result in zip(op.outputs, results):
        info = graph.info(index)
        graph.operands[index] = Operand(
            dataclasses.replace(info, dimensions=() if info.is_scalar else tuple(result.shape)),
            Lifetime.CONSTANT_COPY,
            result,
        )
    graph.replace(position, None, (), f"{op.code.name} of constants computed once")
    return True


def _run_once(graph: _Graph, op: Operation) -> list[np.ndarray] | None:
    """``op``'s outputs, computed by its CPU kernel; None if it cannot or should not be."""
    registration = lookup(op.code)
    if registration is None:
        return None
    signature = _signature(graph, op)
    try:
        state = registration.prepare(signature) if registration.prepare else None
        inputs = [graph.constant(i) for i in op.inputs]
        with np.errstate(all="ignore"):
            results = list(registration.execute(ExecutionContext(signature, inputs, state)))
    except (NNError, ValueError, IndexError, ArithmeticError):
        return None  # left to fail, or not, when it runs
    if len(results) != len(op.outputs):
        return None
    checked = []
    for index, result in zip(op.outputs, results):
        info = graph.info(index)
        result = np.asarray(result)
        declared = info.dimensions
        if (
            result.dtype != info.dtype
            or result.nbytes > MAX_FOLDED_BYTES
            or (declared is None and not info.is_scalar)
            or (declared and not _fits(declared, result.shape))
        ):
            return None
        checked.append(result)
    return checked


def _fits(declared: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    return len(declared) == len(shape) and all(d in (0, s) for d, s in zip(declared, shape))


def _signature(graph: _Graph, op: Operation) -> OperationSignature:
    constants: dict[int, np.ndarray | None] = {}
    for position, index in enumerate(op.inputs):
        operand = graph.operands[index]
        if operand.lifetime in _CONSTANT:
            constants[position] = operand.value
        elif operand.lifetime == Lifetime.NO_VALUE:
            constants[position] = None
    return OperationSignature(
        code=OperationCode(op.code),
        inputs=[graph.info(i) for i in op.inputs],
        outputs=[graph.info(i) for i in op.outputs],
        constants=constants,
    )
