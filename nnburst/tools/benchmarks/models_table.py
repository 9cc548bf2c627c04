"""``nnburst bench --models DIR``: every ``.tflite`` and ``.onnx`` file in a
directory against the runtime its users already have, in one table.

Each model runs in process on the CPU driver (one execution per call,
through the same reusable execution a Runner keeps) and on its peer (LiteRT
or onnxruntime, one thread), the two taking turns in short slices so a
drifting machine slows both alike; the ratio of their p50s is the figure, and
each kind's geometric mean sums the directory up.  A model nnburst cannot
load, or whose outputs differ from its peer's, is listed with the reason
instead of a time.

An ONNX model with symbolic dimensions or inputs to fix takes them from
``DIR/models.json``: ``{"FILE.onnx": {"input_shapes": {"x": [1, 3, 48, 192]},
"constants": {"sr": 16000}}}`` (what :func:`nnburst.onnx.load` takes).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import threadpoolctl

from ...devices import get_devices
from ...errors import BadDataError, NNError
from .model_bench import disagreement, load_with_peer, random_inputs, time_in_turns
from .stats import LatencyStats

#: Seconds per model (split between nnburst and its peer, in turns).
DEFAULT_SECONDS = 2.0


@dataclass
class ModelRow:
    name: str
    kind: str  # "tflite" or "onnx"
    peer: str
    nnburst_p50_us: float | None = None
    peer_p50_us: float | None = None
    why_not: str = ""  # a model without times: why

    @property
    def ratio(self) -> float | None:
        if self.nnburst_p50_us is None or not self.peer_p50_us:
            return None
        return self.nnburst_p50_us / self.peer_p50_us


def model_files(directory: str | Path) -> list[Path]:
    return sorted(p for p in Path(directory).iterdir() if p.suffix in (".tflite", ".onnx"))


def settings(directory: str | Path) -> dict[str, Any]:
    """``DIR/models.json`` (file name → load settings), or nothing."""
    path = Path(directory) / "models.json"
    if not path.exists():
        return {}
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadDataError(f"{path}: {exc}") from None
    if not isinstance(document, dict) or not all(isinstance(v, dict) for v in document.values()):
        raise BadDataError(f"{path}: expected {{FILE: {{input_shapes: ..., constants: ...}}}}")
    return document


def measure(path: Path, seconds: float, setting: dict[str, Any] | None = None) -> ModelRow:
    """One model in process against its peer, or the reason it was not timed."""
    kind = path.suffix[1:]
    setting = setting or {}
    try:
        runner_class, loaded, peer_name, peer, _ = load_with_peer(
            path, path.read_bytes(), setting.get("input_shapes"), setting.get("constants")
        )
    except (NNError, ImportError) as exc:
        return ModelRow(path.name, kind, "", why_not=f"not loaded: {_reason(exc)}")
    row = ModelRow(path.name, kind, peer_name)
    if peer is None:
        row.why_not = f"{peer_name} is not installed"
        return row
    inputs = random_inputs(loaded.inputs)
    cpu = next(d for d in get_devices() if d.name == "nnburst-reference")
    with contextlib.ExitStack() as stack:
        stack.enter_context(threadpoolctl.threadpool_limits(limits=1, user_api="blas"))
        try:
            runner = stack.enter_context(runner_class(loaded, cpu, burst=False, cache_dir=None))
            why = disagreement(runner(*inputs), peer(*inputs))
        except NNError as exc:
            why = _reason(exc)
        if why:
            row.why_not = f"not timed: {why}"
            return row
        samples = time_in_turns(
            [(peer_name, lambda: peer(*inputs)), ("nnburst", lambda: runner(*inputs))],
            seconds,
            None,
        )
    row.peer_p50_us = LatencyStats.from_ns(peer_name, samples[peer_name]).p50_us
    row.nnburst_p50_us = LatencyStats.from_ns("nnburst", samples["nnburst"]).p50_us
    return row


def _reason(exc: BaseException) -> str:
    text = str(exc.args[0] if exc.args else exc)
    return text if len(text) <= 70 else text[:67] + "..."


def geometric_means(rows: list[ModelRow]) -> dict[str, float]:
    """Per kind, the geometric mean of the timed models' ratios."""
    means = {}
    for kind in ("tflite", "onnx"):
        ratios = [r.ratio for r in rows if r.kind == kind and r.ratio is not None]
        if ratios:
            means[kind] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return means


def table(rows: list[ModelRow]) -> str:
    width = max([len("model"), *(len(r.name) for r in rows)])
    lines = [
        f"{'model':<{width}}  {'peer p50 µs':>11}  {'nnburst p50 µs':>14}  {'x peer':>6}",
        "-" * (width + 39),
    ]
    for r in rows:
        if r.ratio is None:
            lines.append(f"{r.name:<{width}}  {r.why_not}")
            continue
        assert r.peer_p50_us is not None and r.nnburst_p50_us is not None
        lines.append(
            f"{r.name:<{width}}  {r.peer_p50_us:>11.1f}  {r.nnburst_p50_us:>14.1f}  {r.ratio:>6.2f}"
        )
    for kind, mean in geometric_means(rows).items():
        peer = "LiteRT" if kind == "tflite" else "onnxruntime"
        lines.append(f"geometric mean, .{kind} against {peer}: {mean:.2f}x its p50")
    return "\n".join(lines)


def main(directory: str | Path, seconds: float = DEFAULT_SECONDS) -> list[ModelRow]:
    files = model_files(directory)
    if not files:
        raise NNError(f"{directory}: no .tflite or .onnx file in it")
    started = time.perf_counter()
    print(
        f"{len(files)} models in {directory}, in process on one thread, nnburst and its "
        f"peer taking turns for {seconds:g} s each:"
    )
    chosen = settings(directory)
    rows = [measure(path, seconds, chosen.get(path.name)) for path in files]
    print(table(rows))
    print(f"{len(files)} models in {time.perf_counter() - started:.1f} s")
    return rows
