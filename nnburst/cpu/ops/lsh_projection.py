"""LSH_PROJECTION: locality-sensitive hashing of input rows into bits.

Each bit is the sign of a (weighted) sum, over the input's rows, of
``Fingerprint64(seed_bytes ++ row_bytes)`` read as a signed 64-bit integer,
where the seed is one float32 of the hash tensor.  The fingerprint is
FarmHash's ``Fingerprint64`` (``farmhashna::Hash64``), which the NNAPI
reference uses; it is reimplemented below on Python integers because its
exact bits decide the output.

Types: 1 = SPARSE (NNAPI 1.0; SPARSE_DEPRECATED from 1.2), one int32 per hash
function holding its ``num_bits`` bits; 2 = DENSE, one 0/1 int32 per bit;
3 = SPARSE (NNAPI 1.2), like 1 plus ``i << num_bits`` so that every hash
function has its own range.
"""

from __future__ import annotations

import struct

import numpy as np

from ...codes import OperandCode, OperationCode
from ..registry import ExecutionContext, OperationSignature, register
from .arguments import (
    FLOAT_TENSOR_CODES,
    constant_scalar,
    known_dim,
    op_failed,
    require_operand_counts,
    require_operand_rank,
    require_operand_type,
)

SPARSE_DEPRECATED, DENSE, SPARSE = 1, 2, 3
_MAX_BITS = 32

# --------------------------------------------------------------- Fingerprint64

_MASK = (1 << 64) - 1
_K0 = 0xC3A5C85C97CB3127
_K1 = 0xB492B66FBE98F273
_K2 = 0x9AE16A3B2F90404F


def _fetch64(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 8], "little")


def _fetch32(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 4], "little")


def _rotate(v: int, shift: int) -> int:
    return v if shift == 0 else ((v >> shift) | (v << (64 - shift))) & _MASK


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def _hash_len16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & _MASK
    a ^= a >> 47
    b = ((v ^ a) * mul) & _MASK
    b ^= b >> 47
    return (b * mul) & _MASK


def _hash_len0to16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = _K2 + n * 2
        a = (_fetch64(s, 0) + _K2) & _MASK
        b = _fetch64(s, n - 8)
        c = (_rotate(b, 37) * mul + a) & _MASK
        d = ((_rotate(a, 25) + b) * mul) & _MASK
        return _hash_len16(c, d, mul)
    if n >= 4:
        mul = _K2 + n * 2
        a = _fetch32(s, 0)
        return _hash_len16((n + (a << 3)) & _MASK, _fetch32(s, n - 4), mul)
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        return (_shift_mix(((y * _K2) ^ (z * _K0)) & _MASK) * _K2) & _MASK
    return _K2


def _hash_len17to32(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_fetch64(s, 0) * _K1) & _MASK
    b = _fetch64(s, 8)
    c = (_fetch64(s, n - 8) * mul) & _MASK
    d = (_fetch64(s, n - 16) * _K2) & _MASK
    return _hash_len16(
        (_rotate((a + b) & _MASK, 43) + _rotate(c, 30) + d) & _MASK,
        (a + _rotate((b + _K2) & _MASK, 18) + c) & _MASK,
        mul,
    )


def _hash_len33to64(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_fetch64(s, 0) * _K2) & _MASK
    b = _fetch64(s, 8)
    c = (_fetch64(s, n - 8) * mul) & _MASK
    d = (_fetch64(s, n - 16) * _K2) & _MASK
    y = (_rotate((a + b) & _MASK, 43) + _rotate(c, 30) + d) & _MASK
    z = _hash_len16(y, (a + _rotate((b + _K2) & _MASK, 18) + c) & _MASK, mul)
    e = (_fetch64(s, 16) * mul) & _MASK
    f = _fetch64(s, 24)
    g = ((y + _fetch64(s, n - 32)) * mul) & _MASK
    h = ((z + _fetch64(s, n - 24)) * mul) & _MASK
    return _hash_len16(
        (_rotate((e + f) & _MASK, 43) + _rotate(g, 30) + h) & _MASK,
        (e + _rotate((f + a) & _MASK, 18) + g) & _MASK,
        mul,
    )


def _weak_hash_len32_with_seeds(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = (_fetch64(s, i + k) for k in (0, 8, 16, 24))
    a = (a + w) & _MASK
    b = _rotate((b + a + z) & _MASK, 21)
    c = a
    a = (a + x + y) & _MASK
    b = (b + _rotate(a, 44)) & _MASK
    return (a + z) & _MASK, (b + c) & _MASK


def fingerprint64(s: bytes) -> int:
    """FarmHash ``Fingerprint64`` of ``s`` as an unsigned 64-bit integer."""
    n = len(s)
    if n <= 16:
        return _hash_len0to16(s)
    if n <= 32:
        return _hash_len17to32(s)
    if n <= 64:
        return _hash_len33to64(s)
    seed = 81
    x = seed
    y = (seed * _K1 + 113) & _MASK
    z = (_shift_mix((y * _K2 + 113) & _MASK) * _K2) & _MASK
    v = (0, 0)
    w = (0, 0)
    x = (x * _K2 + _fetch64(s, 0)) & _MASK
    end = ((n - 1) // 64) * 64
    last64 = n - 64
    i = 0
    while True:
        x = (_rotate((x + y + v[0] + _fetch64(s, i + 8)) & _MASK, 37) * _K1) & _MASK
        y = (_rotate((y + v[1] + _fetch64(s, i + 48)) & _MASK, 42) * _K1) & _MASK
        x ^= w[1]
        y = (y + v[0] + _fetch64(s, i + 40)) & _MASK
        z = (_rotate((z + w[0]) & _MASK, 33) * _K1) & _MASK
        v = _weak_hash_len32_with_seeds(s, i, (v[1] * _K1) & _MASK, (x + w[0]) & _MASK)
        w = _weak_hash_len32_with_seeds(
            s, i + 32, (z + w[1]) & _MASK, (y + _fetch64(s, i + 16)) & _MASK
        )
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = _K1 + ((z & 0xFF) << 1)
    i = last64
    w0 = (w[0] + ((n - 1) & 63)) & _MASK
    v0 = (v[0] + w0) & _MASK
    w0 = (w0 + v0) & _MASK
    v, w = (v0, v[1]), (w0, w[1])
    x = (_rotate((x + y + v[0] + _fetch64(s, i + 8)) & _MASK, 37) * mul) & _MASK
    y = (_rotate((y + v[1] + _fetch64(s, i + 48)) & _MASK, 42) * mul) & _MASK
    x ^= (w[1] * 9) & _MASK
    y = (y + v[0] * 9 + _fetch64(s, i + 40)) & _MASK
    z = (_rotate((z + w[0]) & _MASK, 33) * mul) & _MASK
    v = _weak_hash_len32_with_seeds(s, i, (v[1] * mul) & _MASK, (x + w[0]) & _MASK)
    w = _weak_hash_len32_with_seeds(
        s, i + 32, (z + w[1]) & _MASK, (y + _fetch64(s, i + 16)) & _MASK
    )
    z, x = x, z
    return _hash_len16(
        (_hash_len16(v[0], w[0], mul) + _shift_mix(y) * _K0 + z) & _MASK,
        (_hash_len16(v[1], w[1], mul) + x) & _MASK,
        mul,
    )


# --------------------------------------------------------------- the operation


def _validate(sig: OperationSignature) -> None:
    require_operand_counts(sig, (4,), 1)
    hash_info = require_operand_type(sig, 0, FLOAT_TENSOR_CODES, "hash")
    require_operand_rank(sig, 0, (2,), "hash")
    bits = known_dim(hash_info, 1)
    if bits is not None and bits > _MAX_BITS:
        raise sig.fail(f"hash has {bits} bits per function; at most {_MAX_BITS} are allowed")
    inp = require_operand_type(
        sig,
        1,
        (OperandCode.TENSOR_INT32, OperandCode.TENSOR_QUANT8_ASYMM, *FLOAT_TENSOR_CODES),
        "input",
    )
    if inp.rank == 0:
        raise sig.fail("input 1 (input) must have rank >= 1")
    weight = require_operand_type(sig, 2, (hash_info.code,), "weight")
    weight_omitted = sig.constants.get(2, 0) is None or 0 in (weight.dimensions or (0,))
    if not weight_omitted:
        require_operand_rank(sig, 2, (1,), "weight")
        rows, entries = known_dim(inp, 0), known_dim(weight, 0)
        if None not in (rows, entries) and rows != entries:
            raise sig.fail(f"weight has {entries} entries; input has {rows} rows")
    require_operand_type(sig, 3, (OperandCode.INT32,), "type")
    kind = constant_scalar(sig, 3)
    if kind is not None and kind not in (SPARSE_DEPRECATED, DENSE, SPARSE):
        raise sig.fail(f"type {kind} is not SPARSE_DEPRECATED (1), DENSE (2) or SPARSE (3)")
    require_operand_type(sig, 0, (OperandCode.TENSOR_INT32,), "output", output=True)
    require_operand_rank(sig, 0, (1,), "output", output=True)


def _execute(ctx: ExecutionContext) -> list[np.ndarray]:
    hash_seeds = ctx.input(0)
    x = ctx.input(1)
    weight = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if weight is not None and weight.size == 0:
        weight = None  # omitted: a model input given no data
    kind = ctx.scalar(3)
    if hash_seeds.ndim != 2 or hash_seeds.shape[1] > _MAX_BITS:
        raise op_failed(ctx.code, f"hash of shape {hash_seeds.shape} is not [num_hash, <=32]")
    if x.ndim < 1 or x.shape[0] == 0:
        raise op_failed(ctx.code, f"input of shape {x.shape} has no rows")
    if weight is not None and weight.shape != (x.shape[0],):
        raise op_failed(ctx.code, f"weight shape {weight.shape} != ({x.shape[0]},)")
    if kind not in (SPARSE_DEPRECATED, DENSE, SPARSE):
        raise op_failed(ctx.code, f"type {kind} is not 1, 2 or 3")

    # Rows as the raw little-endian bytes the reference hashes.
    data = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<")).tobytes()
    row_bytes = len(data) // x.shape[0]
    rows = [data[r * row_bytes : (r + 1) * row_bytes] for r in range(x.shape[0])]
    weights = None if weight is None else [float(w) for w in weight.astype(np.float32)]

    def sign_bit(seed: float) -> int:
        key = struct.pack("<f", seed)
        score = 0.0
        for r, row in enumerate(rows):
            signature = fingerprint64(key + row)
            running = float(signature - (1 << 64) if signature >> 63 else signature)
            score += running if weights is None else weights[r] * running
        return 1 if score > 0 else 0

    num_hash, num_bits = hash_seeds.shape
    bits = np.array(
        [[sign_bit(float(s)) for s in row] for row in hash_seeds.astype(np.float32)],
        dtype=np.int64,
    ).reshape(num_hash, num_bits)
    if kind == DENSE:
        return [bits.reshape(-1).astype(np.int32)]
    weights_of_bits = 1 << np.arange(num_bits - 1, -1, -1, dtype=np.int64)
    signatures = (bits * weights_of_bits).sum(axis=1)
    if kind == SPARSE:
        signatures += np.arange(num_hash, dtype=np.int64) << num_bits
    return [(signatures & 0xFFFFFFFF).astype(np.uint32).view(np.int32)]


register(OperationCode.LSH_PROJECTION, validate=_validate, execute=_execute)
