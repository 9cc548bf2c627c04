"""How many inputs and outputs each NNAPI operation takes (feature levels 1–4, and the four operations of level 6).

``Model.add_operation`` checks these counts when it is called, so a
mistake shows up on the line that made it instead of at ``finish``.  The
drivers still validate each operation fully (types, shapes, which optional
operands a version allows); this table only holds the counts any version
of the operation accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

from .codes import OperationCode as Op

__all__ = ["Arity", "arity"]


@dataclass(frozen=True)
class Arity:
    """Allowed operand counts: ``inputs``/``outputs`` list exact counts, or hold one
    count with ``open_ended`` meaning "that many or more"."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...] = (1,)
    inputs_open_ended: bool = False
    outputs_open_ended: bool = False

    def accepts_inputs(self, count: int) -> bool:
        return count >= self.inputs[0] if self.inputs_open_ended else count in self.inputs

    def accepts_outputs(self, count: int) -> bool:
        return count >= self.outputs[0] if self.outputs_open_ended else count in self.outputs

    def describe(self, kind: str) -> str:
        counts = self.inputs if kind == "inputs" else self.outputs
        open_ended = self.inputs_open_ended if kind == "inputs" else self.outputs_open_ended
        if open_ended:
            return f"at least {counts[0]} {kind}"
        return f"{' or '.join(map(str, counts))} {kind}"


_UNARY = Arity((1,))
_BINARY = Arity((2,))
_WITH_ACTIVATION = Arity((3,))  # two tensors and a fused activation
_POOL = Arity((7, 8, 10, 11))  # implicit / explicit padding, each with an optional layout
_REDUCE = Arity((3,))

_TABLE: dict[Op, Arity] = {
    Op.ADD: _WITH_ACTIVATION,
    Op.AVERAGE_POOL_2D: _POOL,
    Op.CONCATENATION: Arity((2,), inputs_open_ended=True),
    Op.CONV_2D: Arity((7, 8, 10, 11, 13)),
    Op.DEPTHWISE_CONV_2D: Arity((8, 9, 11, 12, 14)),
    Op.DEPTH_TO_SPACE: Arity((2, 3)),
    Op.DEQUANTIZE: _UNARY,
    Op.EMBEDDING_LOOKUP: _BINARY,
    Op.FLOOR: _UNARY,
    Op.FULLY_CONNECTED: Arity((4,)),
    Op.HASHTABLE_LOOKUP: Arity((3,), (2,)),
    Op.L2_NORMALIZATION: Arity((1, 2)),
    Op.L2_POOL_2D: _POOL,
    Op.LOCAL_RESPONSE_NORMALIZATION: Arity((5, 6)),
    Op.LOGISTIC: _UNARY,
    Op.LSH_PROJECTION: Arity((4,)),
    Op.LSTM: Arity((23, 27), (4,)),
    Op.MAX_POOL_2D: _POOL,
    Op.MUL: _WITH_ACTIVATION,
    Op.RELU: _UNARY,
    Op.RELU1: _UNARY,
    Op.RELU6: _UNARY,
    Op.RESHAPE: _BINARY,
    Op.RESIZE_BILINEAR: Arity((3, 4, 5, 6)),
    Op.RNN: Arity((6,), (2,)),
    Op.SOFTMAX: Arity((2, 3)),
    Op.SPACE_TO_DEPTH: Arity((2, 3)),
    Op.SVDF: Arity((7,), (2,)),
    Op.TANH: _UNARY,
    Op.BATCH_TO_SPACE_ND: Arity((2, 3)),
    Op.DIV: _WITH_ACTIVATION,
    Op.MEAN: Arity((3,)),
    Op.PAD: _BINARY,
    Op.SPACE_TO_BATCH_ND: Arity((3, 4)),
    Op.SQUEEZE: _BINARY,
    Op.STRIDED_SLICE: Arity((7,)),
    Op.SUB: _WITH_ACTIVATION,
    Op.TRANSPOSE: _BINARY,
    Op.ABS: _UNARY,
    Op.ARGMAX: _BINARY,
    Op.ARGMIN: _BINARY,
    Op.AXIS_ALIGNED_BBOX_TRANSFORM: Arity((4,)),
    Op.BIDIRECTIONAL_SEQUENCE_LSTM: Arity((61,), (1, 2, 5, 6)),
    Op.BIDIRECTIONAL_SEQUENCE_RNN: Arity((15,), (1, 2, 3, 4)),
    Op.BOX_WITH_NMS_LIMIT: Arity((9,), (4,)),
    Op.CAST: _UNARY,
    Op.CHANNEL_SHUFFLE: Arity((3,)),
    Op.DETECTION_POSTPROCESSING: Arity((14,), (4,)),
    Op.EQUAL: _BINARY,
    Op.EXP: _UNARY,
    Op.EXPAND_DIMS: _BINARY,
    Op.GATHER: Arity((3,)),
    Op.GENERATE_PROPOSALS: Arity((11,), (3,)),
    Op.GREATER: _BINARY,
    Op.GREATER_EQUAL: _BINARY,
    Op.GROUPED_CONV_2D: Arity((9, 12)),
    Op.HEATMAP_MAX_KEYPOINT: Arity((3,), (2,)),
    Op.INSTANCE_NORMALIZATION: Arity((5,)),
    Op.LESS: _BINARY,
    Op.LESS_EQUAL: _BINARY,
    Op.LOG: _UNARY,
    Op.LOGICAL_AND: _BINARY,
    Op.LOGICAL_NOT: _UNARY,
    Op.LOGICAL_OR: _BINARY,
    Op.LOG_SOFTMAX: Arity((3,)),
    Op.MAXIMUM: _BINARY,
    Op.MINIMUM: _BINARY,
    Op.NEG: _UNARY,
    Op.NOT_EQUAL: _BINARY,
    Op.PAD_V2: Arity((3,)),
    Op.POW: _BINARY,
    Op.PRELU: _BINARY,
    Op.QUANTIZE: _UNARY,
    Op.QUANTIZED_16BIT_LSTM: Arity((15,), (2,)),
    Op.RANDOM_MULTINOMIAL: Arity((3,)),
    Op.REDUCE_ALL: _REDUCE,
    Op.REDUCE_ANY: _REDUCE,
    Op.REDUCE_MAX: _REDUCE,
    Op.REDUCE_MIN: _REDUCE,
    Op.REDUCE_PROD: _REDUCE,
    Op.REDUCE_SUM: _REDUCE,
    Op.ROI_ALIGN: Arity((10,)),
    Op.ROI_POOLING: Arity((8,)),
    Op.RSQRT: _UNARY,
    Op.SELECT: Arity((3,)),
    Op.SIN: _UNARY,
    Op.SLICE: Arity((3,)),
    Op.SPLIT: Arity((3,), (1,), outputs_open_ended=True),
    Op.SQRT: _UNARY,
    Op.TILE: _BINARY,
    Op.TOPK_V2: Arity((2,), (2,)),
    Op.TRANSPOSE_CONV_2D: Arity((9, 11)),
    Op.UNIDIRECTIONAL_SEQUENCE_LSTM: Arity((24, 28), (1, 3)),
    Op.UNIDIRECTIONAL_SEQUENCE_RNN: Arity((7,), (1, 2)),
    Op.RESIZE_NEAREST_NEIGHBOR: Arity((3, 4, 5, 6)),
    Op.QUANTIZED_LSTM: Arity((32,), (3,)),
    Op.IF: Arity((3,), (1,), inputs_open_ended=True, outputs_open_ended=True),
    Op.WHILE: Arity((3,), (1,), inputs_open_ended=True, outputs_open_ended=True),
    Op.ELU: _BINARY,
    Op.HARD_SWISH: _UNARY,
    Op.FILL: _BINARY,
    Op.RANK: _UNARY,
    Op.BATCH_MATMUL: Arity((2, 3, 4)),
    Op.PACK: Arity((2,), inputs_open_ended=True),
    Op.MIRROR_PAD: Arity((3,)),
    Op.REVERSE: _BINARY,
}


def arity(code: Op) -> Arity | None:
    """The counts ``code`` accepts, or None for a code this table does not know."""
    return _TABLE.get(code)
