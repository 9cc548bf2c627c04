"""Loads NNAPI conformance vectors (JSON, schema in shared/cts/README.md).

The vectors are found through ``NNBURST_CTS_DIR`` (default: ``../shared/cts``
next to the repository).  They are test data only and never copied into the
project.

Without the default folder the conformance tests skip ("no NNAPI conformance
vectors found (NNBURST_CTS_DIR)" under ``pytest -ra``).  A ``NNBURST_CTS_DIR``
that is set but holds no vectors is an error instead: a mistyped path must not
pass as a green run with the conformance tests silently skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnburst.codes import OperandCode, OperationCode
from nnburst.hal.model import HalModel, Lifetime, Operand, Operation, Subgraph
from nnburst.operands import DTYPE_FOR_OPERAND, ChannelQuant, OperandInfo

REPO = Path(__file__).resolve().parent.parent


def cts_dir() -> Path:
    """``$NNBURST_CTS_DIR`` if set (and not empty), else ``../shared/cts`` next to the repository."""
    return Path(os.environ.get("NNBURST_CTS_DIR") or REPO.parent / "shared" / "cts")


@dataclass
class ExpectedOutput:
    operand: int
    dimensions: tuple[int, ...]
    ignored: bool
    values: np.ndarray
    atol: float
    rtol: float


@dataclass
class Vector:
    name: str
    raw: dict[str, Any]
    model: HalModel
    inputs: list[np.ndarray | None]
    outputs: list[ExpectedOutput]
    expect_failure: bool
    multinomial_tolerance: float


def _array(code: int, values: list[Any], dims: tuple[int, ...]) -> np.ndarray:
    dtype = DTYPE_FOR_OPERAND[OperandCode(code)]
    if dtype.kind == "f":
        arr = np.asarray([float(v) for v in values], dtype=np.float64).astype(dtype)
    else:
        arr = np.asarray(values, dtype=dtype)
    return arr.reshape(dims)


def _info(operand: dict[str, Any]) -> OperandInfo:
    code = OperandCode(operand["type"])
    dims: tuple[int, ...] | None = tuple(operand["dimensions"])
    if (
        code
        not in (
            OperandCode.FLOAT32,
            OperandCode.INT32,
            OperandCode.UINT32,
            OperandCode.BOOL,
            OperandCode.FLOAT16,
            OperandCode.MODEL,
        )
        and operand["dimensions"] == []
        and Lifetime(operand["lifetime"])
        not in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE)
    ):
        dims = None
    channel = operand.get("channelQuant")
    quant = ChannelQuant(channel["channelDim"], tuple(channel["scales"])) if channel else None
    return OperandInfo(code, dims, float(operand["scale"]), int(operand["zeroPoint"]), quant)


def _subgraph(raw: dict[str, Any]) -> Subgraph:
    operands = []
    for operand in raw["operands"]:
        info = _info(operand)
        lifetime = Lifetime(operand["lifetime"])
        value = None
        subgraph = None
        if lifetime in (Lifetime.CONSTANT_COPY, Lifetime.CONSTANT_REFERENCE):
            value = _array(operand["type"], operand["value"], tuple(operand["dimensions"]))
        elif lifetime == Lifetime.SUBGRAPH:
            subgraph = int(operand["value"][0])
        operands.append(Operand(info, lifetime, value, subgraph))
    operations = [
        Operation(OperationCode(op["type"]), tuple(op["inputs"]), tuple(op["outputs"]))
        for op in raw["operations"]
    ]
    return Subgraph(operands, operations, tuple(raw["inputIndexes"]), tuple(raw["outputIndexes"]))


def parse_vector(raw: dict[str, Any]) -> Vector:
    model = HalModel(
        _subgraph(raw["main"]),
        [_subgraph(s) for s in raw["referenced"]],
        bool(raw["isRelaxed"]),
    )
    operands = raw["main"]["operands"]
    inputs: list[np.ndarray | None] = []
    for given in raw["inputs"]:
        if given["omitted"]:
            inputs.append(None)
        else:
            code = operands[given["operand"]]["type"]
            inputs.append(_array(code, given["values"], tuple(given["dimensions"])))
    outputs = []
    for expected in raw["outputs"]:
        code = operands[expected["operand"]]["type"]
        outputs.append(
            ExpectedOutput(
                expected["operand"],
                tuple(expected["dimensions"]),
                bool(expected["ignored"]),
                _array(code, expected["values"], tuple(expected["dimensions"])),
                float(expected["tolerance"]["atol"]),
                float(expected["tolerance"]["rtol"]),
            )
        )
    return Vector(
        raw["name"],
        raw,
        model,
        inputs,
        outputs,
        bool(raw["expectFailure"]),
        float(raw.get("expectedMultinomialDistributionTolerance", 0)),
    )


def iter_vectors(
    versions: tuple[str, ...] = ("V1_0", "V1_1"),
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(vector name, raw JSON) for every vector found; nothing if the default folder is absent.

    Raises:
        FileNotFoundError: ``NNBURST_CTS_DIR`` is set but none of ``versions`` is a folder in it.
    """
    root = cts_dir()
    if os.environ.get("NNBURST_CTS_DIR") and not any((root / v).is_dir() for v in versions):
        raise FileNotFoundError(
            f"NNBURST_CTS_DIR={root} holds no NNAPI conformance vectors: expected "
            f"{' and '.join(f'{v}/*.json' for v in versions)} in it (see shared/cts/README.md); "
            "unset NNBURST_CTS_DIR to skip the conformance tests"
        )
    for version in versions:
        folder = root / version
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            with path.open() as f:
                spec = json.load(f)
            for raw in spec["vectors"]:
                yield f"{version}/{raw['name']}", raw


def check_outputs(vector: Vector, actual: list[np.ndarray]) -> None:
    """Assert values (with the vector's tolerance) and dimensions of every output."""
    assert len(actual) == len(vector.outputs)
    for i, (expected, got) in enumerate(zip(vector.outputs, actual)):
        got = np.asarray(got)
        assert tuple(got.shape) == expected.dimensions, (
            f"output {i}: dimensions {got.shape} != expected {expected.dimensions}"
        )
        if expected.ignored:
            continue
        if vector.multinomial_tolerance > 0:
            continue  # compared statistically by the RANDOM_MULTINOMIAL tests
        want = expected.values.astype(np.float64)
        have = got.astype(np.float64)
        bad = np.abs(have - want) > expected.atol + expected.rtol * np.abs(want)
        if got.dtype == np.bool_:
            bad = got != expected.values
        assert not bad.any(), (
            f"output {i}: {int(bad.sum())} of {bad.size} elements off; first at "
            f"{np.argwhere(bad)[0].tolist()}: got {have[bad][0]!r}, want {want[bad][0]!r}"
        )
