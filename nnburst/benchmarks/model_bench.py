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
not timed.  numpy's BLAS is limited to one thread, as the peers are.  The
rows take turns, a slice of their time each, so that a machine whose speed
drifts (a VM's does) slows them alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import threadpoolctl

from ..devices import Device, get_devices
from ..imported import LoadedModel, Runner, TensorInfo
from .runtime_bench import ROUNDS, measure
from .service_process import driver_service
from .stats import LatencyStats, latency_table

LITERT = "LiteRT in-process"
ONNXRUNTIME = "onnxruntime in-process"
DEFAULT_DURATION_S = 2.0

Peer = Callable[..., list[np.ndarray]]


def onnxruntime_runner(model: bytes, inputs: Sequence[TensorInfo]) -> Peer | None:
    """An onnxruntime session on one thread, called like a Runner; None without
    the ``peers`` extra."""
    try:
        import onnxruntime
    except ImportError:
        return None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in inputs]

    def run(*values: np.ndarray) -> list[np.ndarray]:
        return list(session.run(None, dict(zip(names, values))))

    return run


def litert_runner(model: bytes) -> Callable[..., list[np.ndarray]] | None:
    """LiteRT's interpreter as a callable like :class:`~nnburst.tflite.Runner`, or None
    without the ``litert`` extra."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    interpreter = Interpreter(model_content=model, num_threads=1)
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


def turns(seconds: float) -> int:
    """How many turns each row's ``seconds`` are cut into."""
    return max(ROUNDS, round(seconds / TURN_S))


def time_in_turns(
    calls: list[tuple[str, Callable[[], object]]], seconds: float
) -> list[LatencyStats]:
    """Each call timed for ``seconds`` in all, in :func:`turns` slices taken one
    call after another."""
    samples: dict[str, list[np.ndarray]] = {name: [] for name, _ in calls}
    count = turns(seconds)
    for _ in range(count):
        for name, call in calls:
            samples[name].append(measure(call, None, seconds / count))
    return [LatencyStats.from_ns(name, np.concatenate(samples[name])) for name, _ in calls]


def _importer(
    path: str | Path, model: bytes
) -> tuple[type[Runner], LoadedModel, str, Peer | None, str]:
    """The runner class, the loaded model, and the peer (its row name, itself, its extra)."""
    if str(path).endswith(".onnx"):
        from .. import onnx

        loaded = onnx.load(model)
        return onnx.Runner, loaded, ONNXRUNTIME, onnxruntime_runner(model, loaded.inputs), "peers"
    from .. import tflite

    return tflite.Runner, tflite.load(model), LITERT, litert_runner(model), "litert"


def run(
    path: str | Path, seconds: float = DEFAULT_DURATION_S
) -> tuple[list[LatencyStats], list[str], str]:
    """The rows, one note per path that was not timed (and why), and the peer's row name."""
    runner_class, loaded, peer_name, peer, extra = _importer(path, Path(path).read_bytes())
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
        if peer is not None and want is not None and str(path).endswith(".onnx"):
            from .peers import VIA_PIPE, pipe_session

            outputs = [(w.dtype, w.shape) for w in want]
            call = stack.enter_context(pipe_session(str(path), inputs, outputs))
            calls.append((VIA_PIPE, lambda: call(inputs)))

        def add(name: str, device: Device, burst: bool) -> None:
            runner = stack.enter_context(runner_class(loaded, device, burst=burst, cache_dir=None))
            why = disagreement(runner(*inputs), want) if want is not None else None
            if why:
                notes.append(f"{name}: not timed, its outputs differ from {peer_name}'s ({why})")
            else:
                calls.append((name, lambda: runner(*inputs)))

        cpu = next(d for d in get_devices() if d.name == "nnburst-reference")
        add("compute in-process", cpu, False)
        add("burst in-process", cpu, True)
        device = stack.enter_context(driver_service())
        add("sync service", device, False)
        add("burst service", device, True)
        rows = time_in_turns(calls, seconds)
    return rows, notes, peer_name


def main(path: str | Path, seconds: float = DEFAULT_DURATION_S) -> None:
    rows, notes, peer = run(path, seconds)
    print(
        f"{Path(path).name}: one execution per call, {seconds:g} s per row in {turns(seconds)} turns"
        f" (the rows take turns), BLAS and {peer} on one thread"
    )
    print(latency_table(rows, baseline=peer if any(r.name == peer for r in rows) else None))
    for note in notes:
        print(note)
