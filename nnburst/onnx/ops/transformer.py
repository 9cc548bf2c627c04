"""The transformer-era ONNX operators: Attention and RotaryEmbedding (opset 23), Erf.

Attention is scaled dot-product attention built from NNAPI operations,
BATCH_MATMUL (feature level 6) for both products.

Per head: ``softmax(softcap(Q·Kᵀ·scale + mask)) · V``.  3-D inputs are split
into heads ([B, S, heads·H] → [B, heads, S, H]) and the output joined back;
past keys and values are concatenated before the new ones (and are the
``present`` outputs); grouped-query attention repeats each key/value head for
its group of query heads (a broadcast ADD at rank 5, the nnburst.rank_above_4
extension).  A boolean mask becomes 0 / −∞ (SELECT), a causal one is a constant
added at load.  The optional ``qk_matmul_output`` is taken at the stage
``qk_matmul_output_mode`` names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from ...codes import OperandCode, OperationCode
from ..converter import Converter, Unsupported, maps
from .building import apply, erf, filled, permuted, reshaped

_F32 = np.dtype(np.float32)


def _optional(node: onnx.NodeProto, i: int, outputs: bool = False) -> str:
    names = node.output if outputs else node.input
    return names[i] if len(names) > i else ""


def _heads(c: Converter, name: str, heads: int | None) -> tuple[int, tuple[int, ...]]:
    """``name`` as [B, heads, S, H]: 4-D as given, 3-D split into ``heads``."""
    shape = c.shape(name)
    if c.dtype(name) != np.float32:
        raise Unsupported(f"{c.dtype(name)} operands")
    if len(shape) == 4:
        return c.operand(name), shape
    if len(shape) != 3 or not heads or shape[2] % heads:
        raise Unsupported(f"a rank-{len(shape)} {name!r} without a head count that divides it")
    b, s, width = shape
    split = reshaped(c, c.operand(name), _F32, shape, (b, s, heads, width // heads))
    return permuted(c, split, (b, s, heads, width // heads), [0, 2, 1, 3]), (
        b,
        heads,
        s,
        width // heads,
    )


def _grouped(
    c: Converter, x: int, shape: tuple[int, ...], groups: int
) -> tuple[int, tuple[int, ...]]:
    """[B, kv, S, H] with each head repeated ``groups`` times in place: [B, kv·groups, S, H]."""
    if groups == 1:
        return x, shape
    b, kv, s, h = shape
    wide = reshaped(c, x, _F32, shape, (b, kv, 1, s, h))
    repeated = apply(c, OperationCode.ADD, [wide, filled(c, _F32, (b, kv, groups, s, h), -0.0)],
                     _F32, (b, kv, groups, s, h))  # fmt: skip
    return reshaped(c, repeated, _F32, (b, kv, groups, s, h), (b, kv * groups, s, h)), (
        b,
        kv * groups,
        s,
        h,
    )


def _with_past(c: Converter, node: onnx.NodeProto, index: int, x: int,
               shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:  # fmt: skip
    past = _optional(node, index)
    if not past:
        return x, shape
    past_shape = c.shape(past)
    if len(past_shape) != 4 or c.dtype(past) != np.float32:
        raise Unsupported("a past key or value that is not 4-D float32")
    total = (*shape[:2], past_shape[2] + shape[2], shape[3])
    return apply(c, OperationCode.CONCATENATION, [c.operand(past), x, c.i32(2)], _F32, total), total


def _present(
    c: Converter, node: onnx.NodeProto, index: int, x: int, shape: tuple[int, ...]
) -> None:
    name = _optional(node, index, outputs=True)
    if name:
        c.add(OperationCode.RESHAPE, [x, c.ints(shape)], [c.operand(name)])


@maps("Attention")
def _attention(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    q_heads, kv_heads = a.get("q_num_heads"), a.get("kv_num_heads")
    three_d = len(c.shape(node.input[0])) == 3
    q, q_shape = _heads(c, node.input[0], q_heads)
    k, k_shape = _heads(c, node.input[1], kv_heads)
    v, v_shape = _heads(c, node.input[2], kv_heads)
    k, k_shape = _with_past(c, node, 4, k, k_shape)
    v, v_shape = _with_past(c, node, 5, v, v_shape)
    _present(c, node, 1, k, k_shape)
    _present(c, node, 2, v, v_shape)
    batch, heads, sq, head_size = q_shape
    if k_shape[1] == 0 or heads % k_shape[1] or v_shape[1] != k_shape[1]:
        raise Unsupported(f"{heads} query heads over {k_shape[1]} key and {v_shape[1]} value heads")
    k, k_shape = _grouped(c, k, k_shape, heads // k_shape[1])
    v, v_shape = _grouped(c, v, v_shape, heads // v_shape[1])
    total = k_shape[2]
    scores_shape = (batch, heads, sq, total)
    no, yes = (
        c.constant(OperandCode.BOOL, np.bool_(False)),
        c.constant(OperandCode.BOOL, np.bool_(True)),
    )
    scores = apply(c, OperationCode.BATCH_MATMUL, [q, k, no, yes], _F32, scores_shape)
    scale = float(a.get("scale", 1.0 / np.sqrt(head_size)))
    scores = apply(c, OperationCode.MUL, [scores, filled(c, _F32, (1,), scale)], _F32, scores_shape)
    softcap = float(a.get("softcap", 0.0))
    if softcap > 0:  # before the mask, so that a masked score stays −∞
        shrunk = apply(
            c, OperationCode.MUL, [scores, filled(c, _F32, (1,), 1.0 / softcap)], _F32, scores_shape
        )
        bent = apply(c, OperationCode.TANH, [shrunk], _F32, scores_shape)
        scores = apply(
            c, OperationCode.MUL, [bent, filled(c, _F32, (1,), softcap)], _F32, scores_shape
        )
    stages = {0: scores, 1: scores}
    mask = _optional(node, 3)
    biases = []  # what is added to the scores: the mask, the causal −∞ above the diagonal
    if mask:
        biases.append((_additive_mask(c, mask, total), (*c.shape(mask)[:-1], total)))
    positional = _positional_bias(c, node, a, sq, total)
    if positional is not None:
        biases.append((c.floats(positional), positional.shape))
    bias = None
    if biases:
        bias, bias_shape = biases[0]
        if len(biases) == 2:
            bias_shape = tuple(np.broadcast_shapes(bias_shape, biases[1][1]))
            bias = apply(c, OperationCode.ADD, [bias, biases[1][0]], _F32, bias_shape)
        scores = apply(c, OperationCode.ADD, [scores, bias], _F32, scores_shape)
    stages[2] = scores
    weights = apply(c, OperationCode.SOFTMAX, [scores, c.f32(1.0), c.i32(-1)], _F32, scores_shape)
    if bias is not None:  # a row the bias masks entirely attends to nothing: zeros, not NaN
        weights = _zero_masked_rows(c, weights, scores_shape, bias, bias_shape)
    stages[3] = weights
    qk_name = _optional(node, 3, outputs=True)
    if qk_name:
        mode = int(a.get("qk_matmul_output_mode", 0))
        if mode not in stages:
            raise Unsupported(f"qk_matmul_output_mode {mode}")
        c.add(OperationCode.RESHAPE, [stages[mode], c.ints(scores_shape)], [c.operand(qk_name)])
    y_shape = (batch, heads, sq, v_shape[3])
    out = c.operand(node.output[0])
    if not three_d:
        c.add(OperationCode.BATCH_MATMUL, [weights, v, no, no], [out])
        return
    y = apply(c, OperationCode.BATCH_MATMUL, [weights, v, no, no], _F32, y_shape)
    joined = permuted(c, y, y_shape, [0, 2, 1, 3])
    c.add(OperationCode.RESHAPE, [joined, c.ints(c.shape(node.output[0]))], [out])


def _positional_bias(c: Converter, node: onnx.NodeProto, a: dict[str, Any], sq: int,
                     total: int) -> np.ndarray | None:  # fmt: skip
    """The −∞ that causality, a local window and keys padded per batch add, known at
    load: query i sits at offset + i, the offset being the past keys' count, or
    (without past keys) each batch's valid keys minus the queries."""
    causal = bool(a.get("is_causal", 0))
    left, right = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
    padded = _optional(node, 6)
    if not (causal or left >= 0 or right >= 0 or padded):
        return None
    offset: Any = total - c.shape(node.input[1])[-2]  # the past keys
    valid = None
    if padded:
        valid = c.value(padded, "nonpad_kv_seqlen").astype(np.int64).reshape(-1, 1, 1, 1)
        if not _optional(node, 4):
            offset = valid - sq
    query = np.arange(sq).reshape(sq, 1)
    key = np.arange(total).reshape(1, total)
    distance = query + offset - key  # how far key j lies behind query i
    allowed = np.ones(np.shape(distance), bool)
    if causal:
        allowed &= distance >= 0
    if left >= 0:
        allowed &= distance <= left
    if right >= 0:
        allowed &= -distance <= right
    if valid is not None:
        allowed = allowed & (key < valid)
    return np.where(allowed, np.float32(0), np.float32(-np.inf)).astype(np.float32)


def _zero_masked_rows(c: Converter, weights: int, shape: tuple[int, ...], bias: int,
                      bias_shape: tuple[int, ...]) -> int:  # fmt: skip
    """``weights`` with the rows where ``bias`` is −∞ throughout set to 0."""
    boolean = np.dtype(np.bool_)
    row_shape = (*bias_shape[:-1], 1)
    largest = apply(
        c, OperationCode.REDUCE_MAX, [bias, c.ints([-1]), c.boolean(True)], _F32, row_shape
    )
    # NNAPI's REDUCE_MAX starts from the lowest finite float: a row of −∞ gives that.
    lowest = filled(c, _F32, (1,), float(np.finfo(np.float32).min))
    masked = apply(c, OperationCode.LESS_EQUAL, [largest, lowest], boolean, row_shape)
    everywhere = apply(
        c, OperationCode.LOGICAL_OR, [masked, filled(c, boolean, shape, False)], boolean, shape
    )
    return apply(
        c, OperationCode.SELECT, [everywhere, filled(c, _F32, shape, 0.0), weights], _F32, shape
    )


def _additive_mask(c: Converter, name: str, total: int) -> int:
    """A float mask as given, a boolean one as 0 where True (attend) and −∞ where
    False; one shorter than the keys is padded with −∞ (the keys past it are masked)."""
    dtype, shape = c.dtype(name), c.shape(name)
    if dtype == np.float32:
        mask = c.operand(name)
    elif dtype == np.bool_:
        zeros, minus = filled(c, _F32, shape, 0.0), filled(c, _F32, shape, -np.inf)
        mask = apply(c, OperationCode.SELECT, [c.operand(name), zeros, minus], _F32, shape)
    else:
        raise Unsupported(f"a {dtype} attention mask")
    if not shape or shape[-1] >= total:
        return mask
    paddings = np.zeros((len(shape), 2), np.int32)
    paddings[-1, 1] = total - shape[-1]
    widened = (*shape[:-1], total)
    pads = c.constant(OperandCode.TENSOR_INT32, paddings, paddings.shape)
    return apply(c, OperationCode.PAD_V2, [mask, pads, c.f32(-np.inf)], _F32, widened)


@maps("Erf")
def _erf(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """building.erf: the series near 0, Abramowitz and Stegun's tail beyond."""
    name = node.input[0]
    if c.dtype(name) != np.float32:
        raise Unsupported(f"{c.dtype(name)} operands")
    erf(c, c.operand(name), c.shape(name) or (1,), c.operand(node.output[0]))


def _slice(c: Converter, x: int, shape: tuple[int, ...], begin: list[int], size: list[int]) -> int:
    return apply(c, OperationCode.SLICE, [x, c.ints(begin), c.ints(size)], _F32, tuple(size))


@maps("RotaryEmbedding")
def _rotary_embedding(c: Converter, node: onnx.NodeProto, a: dict[str, Any]) -> None:
    """Rotates pairs of each head's first ``rotary_embedding_dim`` features by the
    angle of the token's position (the cos and sin caches, GATHERed by position_ids
    when given): the halves of the rotated part, or its even and odd features
    (``interleaved``, as [.., half, 2] at rank 5)."""
    name, cos_name, sin_name = node.input[:3]
    ids = _optional(node, 3)
    if c.dtype(name) != np.float32:
        raise Unsupported(f"{c.dtype(name)} operands")
    shape = c.shape(name)
    if len(shape) == 4:
        b, heads, s, h = shape
        x = permuted(c, c.operand(name), shape, [0, 2, 1, 3])
    elif len(shape) == 3 and a.get("num_heads") and shape[2] % int(a["num_heads"]) == 0:
        b, s, width = shape
        heads = int(a["num_heads"])
        h = width // heads
        x = reshaped(c, c.operand(name), _F32, shape, (b, s, heads, h))
    else:
        raise Unsupported(f"a rank-{len(shape)} input without num_heads that divides it")
    rotated = int(a.get("rotary_embedding_dim", 0)) or h
    half = rotated // 2
    tables = []
    for table in (cos_name, sin_name):
        operand, table_shape = c.operand(table), c.shape(table)
        if ids:
            gathered = (*c.shape(ids), *table_shape[1:])
            operand = apply(
                c, OperationCode.GATHER, [operand, c.i32(0), c.operand(ids)], _F32, gathered
            )
            table_shape = gathered
        if table_shape != (b, s, half):
            raise Unsupported(f"a cos/sin table of shape {list(table_shape)} for {b}x{s}x{half}")
        tables.append((operand, table_shape))
    x4 = (b, s, heads, h)
    angle_shape: tuple[int, ...]
    part = x if rotated == h else _slice(c, x, x4, [0, 0, 0, 0], [b, s, heads, rotated])
    if a.get("interleaved", 0):
        pairs = (b, s, heads, half, 2)
        paired = reshaped(c, part, _F32, (b, s, heads, rotated), pairs)
        x1 = _slice(c, paired, pairs, [0] * 5, [b, s, heads, half, 1])
        x2 = _slice(c, paired, pairs, [0, 0, 0, 0, 1], [b, s, heads, half, 1])
        angle_shape, axis = (b, s, 1, half, 1), 4
    else:
        x1 = _slice(c, part, (b, s, heads, rotated), [0, 0, 0, 0], [b, s, heads, half])
        x2 = _slice(c, part, (b, s, heads, rotated), [0, 0, 0, half], [b, s, heads, half])
        angle_shape, axis = (b, s, 1, half), 3
    cos, sin = (reshaped(c, t, _F32, t_shape, angle_shape) for t, t_shape in tables)
    one: tuple[int, ...] = (b, s, heads, half, 1) if axis == 4 else (b, s, heads, half)

    def times(u: int, v: int) -> int:
        return apply(c, OperationCode.MUL, [u, v], _F32, one)

    real = apply(c, OperationCode.SUB, [times(cos, x1), times(sin, x2)], _F32, one)
    imag = apply(c, OperationCode.ADD, [times(sin, x1), times(cos, x2)], _F32, one)
    both = (*one[:-1], one[-1] * 2)
    turned = apply(c, OperationCode.CONCATENATION, [real, imag, c.i32(axis)], _F32, both)
    turned = reshaped(c, turned, _F32, both, (b, s, heads, rotated))
    if rotated != h:
        rest = _slice(c, x, x4, [0, 0, 0, rotated], [b, s, heads, h - rotated])
        turned = apply(c, OperationCode.CONCATENATION, [turned, rest, c.i32(3)], _F32, x4)
    out = c.operand(node.output[0])
    if len(shape) == 4:
        c.add(OperationCode.TRANSPOSE, [turned, c.ints([0, 2, 1, 3])], [out])
    else:
        c.add(OperationCode.RESHAPE, [turned, c.ints(shape)], [out])
