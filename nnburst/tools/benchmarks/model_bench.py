"""``nnburst bench --model FILE``: a real model through every path, against its own runtime.

Rows, in one run and on the same random inputs: the file's own runtime in
this process, on one thread (LiteRT's interpreter for ``.tflite``:
``set_tensor`` + ``invoke`` + ``get_tensor``, what an app calls;
onnxruntime's session for ``.onnx``, and the same session in a worker
process behind a ``multiprocessing.Pipe``), then nnburst's runner
(:mod:`nnburst.imported`) on the in-process CPU device (``compute``, then a
burst) and on a driver service's device (synchronous, then a burst).
nnburst's outputs are first checked against the peer's (the CTS's relaxed
tolerance, ±1 for quantized outputs); a path that disagrees is reported and
not timed.  numpy's BLAS is limited to one thread; ``threads`` (``nnburst
bench --threads N``, default 1) is every row's kernel thread count: the
peers' ``num_threads`` / ``intra_op_num_threads``, nnburst's runners' and the
driver service's ``--threads``.  The
rows take turns, a slice of their time each, so that a machine whose speed
drifts (a VM's does) slows them alike.
"""

from __future__ import annotations

import contextlib
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import threadpoolctl

from ...devices import Device, get_devices
from ...errors import BadDataError
from ...imported import LoadedModel, Runner, TensorInfo
from .peers import VIA_PIPE, pipe_session
from .runtime_bench import ROUNDS, measure
from .service_process import driver_service
from .stats import WIDTH, LatencyStats, compared, latency_table

LITERT = "LiteRT in-process"
ONNXRUNTIME = "onnxruntime in-process"
DEFAULT_DURATION_S = 2.0

Peer = Callable[..., list[np.ndarray]]


def onnxruntime_runner(
    model: bytes,
    inputs: Sequence[TensorInfo],
    fixed: Mapping[str, np.ndarray] | None = None,
    threads: int = 1,
) -> Peer | None:
    """An onnxruntime session on ``threads`` intra-op threads (one inter-op), called
    like a Runner (``fixed``: the inputs nnburst took as constants, fed on every
    call); None without the ``peers`` extra."""
    try:
        import onnxruntime
    except ImportError:
        return None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in inputs]

    def run(*values: np.ndarray) -> list[np.ndarray]:
        return list(session.run(None, {**dict(zip(names, values)), **(fixed or {})}))

    return run


def litert_runner(
    model: bytes, shapes: Sequence[Sequence[int]] = (), threads: int = 1
) -> Callable[..., list[np.ndarray]] | None:
    """LiteRT's interpreter as a callable like :class:`~nnburst.tflite.Runner` (its
    inputs resized to ``shapes`` where given), or None without the ``litert`` extra."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    interpreter = Interpreter(model_content=model, num_threads=threads)
    for detail, shape in zip(interpreter.get_input_details(), shapes):
        if tuple(detail["shape"]) != tuple(shape):
            interpreter.resize_tensor_input(detail["index"], list(shape))
    interpreter.allocate_tensors()
    inputs = [d["index"] for d in interpreter.get_input_details()]
    outputs = [d["index"] for d in interpreter.get_output_details()]

    def run(*values: np.ndarray) -> list[np.ndarray]:
        for index, value in zip(inputs, values):
            interpreter.set_tensor(index, value)
        interpreter.invoke()
        return [interpreter.get_tensor(i) for i in outputs]

    return run


def random_inputs(infos: Sequence[TensorInfo], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    values = []
    for info in infos:
        if np.issubdtype(info.dtype, np.integer):
            limits = np.iinfo(info.dtype)
            values.append(
                rng.integers(limits.min, limits.max, info.shape, dtype=info.dtype, endpoint=True)
            )
        else:
            values.append(rng.uniform(-1, 1, info.shape).astype(info.dtype))
    return values


def disagreement(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str | None:
    """Why ``got`` is not LiteRT's answer, or None."""
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"output {i}: shape {list(g.shape)}, LiteRT {list(w.shape)}"
        if np.issubdtype(w.dtype, np.integer):
            worst = int(np.abs(g.astype(np.int64) - w.astype(np.int64)).max(initial=0))
            if worst > 1:
                return f"output {i}: off by {worst} quantization steps"
        elif not np.allclose(g, w, rtol=5e-3, atol=5e-3):
            return f"output {i}: max difference {float(np.abs(g - w).max()):.3g}"
    return None


#: How long each row runs before the next takes its turn.  A VM's speed drifts
#: by a third within a second (face_detection: 1.6-2.6 ms in one process, 0.5 s
#: apart), so rows compared with each other take short turns.
TURN_S = 0.1


def turns(seconds: float | None) -> int:
    """How many turns each row's ``seconds`` are cut into (a row bounded by a count
    only: ROUNDS)."""
    return ROUNDS if seconds is None else max(ROUNDS, round(seconds / TURN_S))


def time_in_turns(
    calls: list[tuple[str, Callable[[], object]]],
    seconds: float | None,
    iterations: int | None = None,
) -> dict[str, np.ndarray]:
    """Each call's latencies (ns) over ``seconds`` and/or ``iterations`` in all, whichever
    ends first, in :func:`turns` slices taken one call after another."""
    samples: dict[str, list[np.ndarray]] = {name: [] for name, _ in calls}
    count = turns(seconds)
    for turn in range(count):
        limit = None
        if iterations is not None:  # the count split exactly over the turns
            limit = iterations // count + (turn < iterations % count)
            if limit == 0:
                break
        for name, call in calls:
            samples[name].append(measure(call, limit, None if seconds is None else seconds / count))
    return {name: np.concatenate(parts) for name, parts in samples.items()}


def load_with_peer(
    path: str | Path,
    model: bytes,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constants: Mapping[str, Any] | None = None,
    threads: int = 1,
) -> tuple[type[Runner], LoadedModel, str, Peer | None, str]:
    """The runner class, the loaded model, and the peer (its row name, itself, its extra)."""
    if str(path).endswith(".onnx"):
        from ... import onnx
        from ...onnx.loading import declared_constant, read_model

        loaded = onnx.load(model, input_shapes, constants)
        proto = read_model(model)[0]
        fixed = {n: declared_constant(proto, n, v) for n, v in (constants or {}).items()}
        peer = onnxruntime_runner(model, loaded.inputs, fixed, threads)
        return onnx.Runner, loaded, ONNXRUNTIME, peer, "peers"
    if constants:
        raise BadDataError("a TFLite model has no inputs to fix (ONNX models do)")
    from ... import tflite

    loaded = tflite.load(model, dict(input_shapes or {}) or None)
    peer = litert_runner(model, [i.shape for i in loaded.inputs], threads)
    return tflite.Runner, loaded, LITERT, peer, "litert"


@dataclass
class Result:
    """One ``bench --model FILE`` run: what :func:`text`, the JSON document, the plot
    and the report page are made from."""

    path: str
    peer: str  # the peer's row name (LITERT or ONNXRUNTIME), whether or not it ran
    inputs: list[TensorInfo]
    seconds: float | None  # per row; None: bounded by ``iterations`` only
    iterations: int | None  # per row; None: bounded by ``seconds`` only
    rows: list[LatencyStats]
    samples_ns: dict[str, np.ndarray] = field(repr=False)
    notes: list[str]  # one per path not timed, and why
    wall_seconds: float
    threads: int = 1  # every row's kernel threads

    @property
    def turns(self) -> int:
        return turns(self.seconds)

    def row(self, name: str) -> LatencyStats | None:
        return next((r for r in self.rows if r.name == name), None)


def run(
    path: str | Path,
    seconds: float | None = DEFAULT_DURATION_S,
    iterations: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constants: Mapping[str, Any] | None = None,
    threads: int = 1,
) -> Result:
    """Every path of the model at ``path``, ``seconds`` and/or ``iterations`` per row
    (an ONNX model's symbolic shapes and fixed inputs as :func:`nnburst.onnx.load`
    takes them), every row on ``threads`` kernel threads."""
    if seconds is None and iterations is None:
        raise ValueError("a row needs a duration or an iteration count")
    started = time.perf_counter()
    runner_class, loaded, peer_name, peer, extra = load_with_peer(
        path, Path(path).read_bytes(), input_shapes, constants, threads
    )
    inputs = random_inputs(loaded.inputs)
    calls: list[tuple[str, Callable[[], object]]] = []
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(threadpoolctl.threadpool_limits(limits=1, user_api="blas"))
        want = peer(*inputs) if peer is not None else None
        if peer is None:
            packages = {"litert": "ai-edge-litert", "peers": "onnxruntime"}[extra]
            notes.append(
                f"{peer_name}: not installed (pip install {packages}, "
                f"or '.[{extra}]' in nnburst's checkout)"
            )
        else:
            calls.append((peer_name, lambda: peer(*inputs)))
        if constants and str(path).endswith(".onnx"):
            notes.append(f"{VIA_PIPE}: not timed with --constant (its worker feeds every input)")
        elif peer is not None and want is not None and str(path).endswith(".onnx"):
            outputs = [(w.dtype, w.shape) for w in want]
            call = stack.enter_context(pipe_session(str(path), inputs, outputs))
            calls.append((VIA_PIPE, lambda: call(inputs)))

        def add(name: str, device: Device, burst: bool) -> None:
            runner = stack.enter_context(
                runner_class(loaded, device, burst=burst, cache_dir=None, threads=threads)
            )
            why = disagreement(runner(*inputs), want) if want is not None else None
            if why:
                notes.append(f"{name}: not timed, its outputs differ from {peer_name}'s ({why})")
            else:
                calls.append((name, lambda: runner(*inputs)))

        # The runtime bench's names (runtime_bench.Mode.name): one vocabulary in every table.
        cpu = next(d for d in get_devices() if d.name == "nnburst-reference")
        add("sync in-process", cpu, False)
        add("burst in-process", cpu, True)
        device = stack.enter_context(driver_service(threads=threads))
        add("sync cross-process", device, False)
        add("burst cross-process", device, True)
        samples = time_in_turns(calls, seconds, iterations)
    rows = [LatencyStats.from_ns(name, ns) for name, ns in samples.items()]
    return Result(
        str(path),
        peer_name,
        list(loaded.inputs),
        seconds,
        iterations,
        rows,
        samples,
        notes,
        time.perf_counter() - started,
        threads,
    )


def bound(result: Result) -> str:
    """How long each row ran, in words."""
    if result.seconds is not None and result.iterations is not None:
        return f"{result.seconds:g} s or {result.iterations} executions, whichever came first"
    if result.seconds is not None:
        return f"{result.seconds:g} s"
    return f"{result.iterations} executions"


def head(result: Result) -> str:
    """What was timed, in one sentence: the line over the table, the note atop the page."""
    return (
        f"{Path(result.path).name}: one execution per call; each row ran {bound(result)}, "
        f"in {result.turns} slices taken in turn with the other rows; BLAS on one thread, "
        + (
            f"{result.peer} on one thread."
            if result.threads == 1
            else f"{result.peer} and nnburst's kernels on {result.threads} threads."
        )
    )


def text(result: Result) -> str:
    """The table, led by one line saying what was timed, read in a sentence, with the
    notes under it; no line wider than WIDTH."""
    peer = result.row(result.peer)
    lines = [_wrapped(head(result), "", "  ")]
    short = "x LiteRT" if result.peer == LITERT else "x ort"
    lines.append(
        latency_table(result.rows, baseline=result.peer if peer else None, ratio_title=short)
    )
    sentences = []
    for placement, theirs in (("in-process", peer), ("cross-process", result.row(VIA_PIPE))):
        ours = [r for r in result.rows if r.name.endswith(placement) and r.name != result.peer]
        if theirs is not None and ours:
            best = min(ours, key=lambda r: r.p50_us)
            sentences.append(f"{best.name} is {compared(best.p50_us, theirs.p50_us, theirs.name)}")
    if sentences:
        reading = "; ".join(sentences) + " (p50)."
        lines.append(_wrapped(reading, "Reading: ", " " * len("Reading: ")))
    lines += [_wrapped(note, "", "  ") for note in result.notes]
    return "\n".join(lines)


def _wrapped(line: str, first: str, then: str) -> str:
    return textwrap.fill(
        line, WIDTH, initial_indent=first, subsequent_indent=then, break_on_hyphens=False
    )


def main(
    path: str | Path,
    seconds: float | None = DEFAULT_DURATION_S,
    iterations: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constants: Mapping[str, Any] | None = None,
    threads: int = 1,
) -> Result:
    """Run and print; the result is returned for the files the command writes."""
    result = run(path, seconds, iterations, input_shapes, constants, threads)
    print(text(result))
    return result
