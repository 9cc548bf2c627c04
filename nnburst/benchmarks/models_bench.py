"""``nnburst bench --models DIR``: every model file in a folder against its own runtime.

One row per ``.tflite`` or ``.onnx`` file: the p50 of its runtime in this
process on one thread (LiteRT, onnxruntime; as ``nnburst bench --model``
times them) and of nnburst's runner on the in-process CPU device, on the
same random inputs after nnburst's outputs are checked against the
runtime's.  Then the geometric mean of the ratios per kind of file, the
number to follow across changes.  The two rows of a model take turns
(:func:`model_bench.time_in_turns`), so a machine whose speed drifts slows
both alike; models are timed one after another.  A model that cannot be
timed (no runtime installed, a dynamic input shape, outputs that differ)
gets a note saying why instead of a row.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import threadpoolctl

from ..devices import get_devices
from ..errors import NNError
from . import model_bench

KINDS = (".tflite", ".onnx")
DEFAULT_DURATION_S = model_bench.DEFAULT_DURATION_S
NNBURST = "nnburst compute in-process"


@dataclass(frozen=True)
class ModelRow:
    """One model's p50s (µs) and their ratio."""

    name: str
    kind: str
    peer: str
    peer_p50_us: float
    nnburst_p50_us: float

    @property
    def ratio(self) -> float:
        return self.nnburst_p50_us / self.peer_p50_us


def model_files(directory: str | Path) -> list[Path]:
    """The ``.tflite`` and ``.onnx`` files directly in ``directory``, by name."""
    return sorted(p for p in Path(directory).iterdir() if p.is_file() and p.suffix in KINDS)


def time_model(path: Path, seconds: float) -> ModelRow | str:
    """One model's row, or why it has none."""
    try:
        runner_class, loaded, peer_name, peer, extra = model_bench._importer(
            path, path.read_bytes()
        )
    except (NNError, ValueError, OSError) as exc:
        return f"{path.name}: not loaded ({exc.args[0] if exc.args else exc})"
    if peer is None:
        return f"{path.name}: {peer_name} is not installed (pip install 'nnburst[{extra}]')"
    try:
        inputs = model_bench.random_inputs(loaded.inputs)
    except (TypeError, ValueError) as exc:
        return f"{path.name}: no inputs to time it with ({exc})"
    cpu = next(d for d in get_devices() if d.name == "nnburst-reference")
    with contextlib.ExitStack() as stack:
        try:
            runner = stack.enter_context(runner_class(loaded, cpu, burst=False, cache_dir=None))
            got, want = runner(*inputs), peer(*inputs)
        except (NNError, ValueError) as exc:
            return f"{path.name}: not run ({exc.args[0] if exc.args else exc})"
        why = model_bench.disagreement(got, want)
        if why:
            return f"{path.name}: not timed, its outputs differ from {peer_name}'s ({why})"
        calls: list[tuple[str, Callable[[], object]]] = [
            (peer_name, lambda: peer(*inputs)),
            (NNBURST, lambda: runner(*inputs)),
        ]
        peer_row, ours = model_bench.time_in_turns(calls, seconds)
    return ModelRow(path.name, path.suffix, peer_name, peer_row.p50_us, ours.p50_us)


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def table(rows: list[ModelRow]) -> str:
    """The rows, then one geometric mean of the ratios per kind of file."""
    width = max([len("model"), *(len(r.name) for r in rows)])
    lines = [f"{'model':<{width}}  {'runtime':<24} {'p50 µs':>9} {'nnburst µs':>11} {'ratio':>7}"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(
            f"{r.name:<{width}}  {r.peer:<24} {r.peer_p50_us:>9.1f} {r.nnburst_p50_us:>11.1f}"
            f" {r.ratio:>6.2f}x"
        )
    for kind in KINDS:
        ratios = [r.ratio for r in rows if r.kind == kind]
        if ratios:
            lines.append(
                f"geometric mean of {len(ratios)} {kind} model(s): "
                f"{geometric_mean(ratios):.2f}x (max {max(ratios):.2f}x)"
            )
    return "\n".join(lines)


def run(directory: str | Path, seconds: float) -> tuple[list[ModelRow], list[str]]:
    """Every model's row, and the notes for those that have none."""
    rows: list[ModelRow] = []
    notes: list[str] = []
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        for path in model_files(directory):
            result = time_model(path, seconds)
            if isinstance(result, str):
                notes.append(result)
            else:
                rows.append(result)
    return rows, notes


def main(directory: str | Path, seconds: float = DEFAULT_DURATION_S) -> int:
    """Print the table; the number of models timed."""
    files = model_files(directory)
    print(
        f"{len(files)} model file(s) in {directory}: one execution per call, {seconds:g} s per row "
        f"in {model_bench.turns(seconds)} turns (each model's two rows take turns), BLAS and "
        "the runtimes on one thread"
    )
    rows, notes = run(directory, seconds)
    if rows:
        print(table(rows))
    for note in notes:
        print(note)
    return len(rows)
