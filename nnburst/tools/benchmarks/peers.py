"""onnxruntime peers for ``nnburst bench``: the same models, run the way a Python user would.

The issue's latency goals are ratios against these rows, so they run the
same two models built from the same constants (:attr:`.Workload.constants`)
and are checked against nnburst's output before they are timed:

* ``onnxruntime in-process``: one ``InferenceSession`` (CPU provider,
  ``intra_op_num_threads=1``, ``inter_op_num_threads=1``, sequential
  execution, default graph optimizations), ``session.run`` per call;
* ``onnxruntime via Pipe``: the same session in a worker process (``python
  -P -m nnburst.tools.benchmarks.peers``, started like every nnburst child, see
  :mod:`nnburst.service.launch`), fed raw input bytes over a
  ``multiprocessing.Pipe`` and answering the output's raw bytes: the
  plainest way to offload inference from Python.  ``send_bytes`` and
  ``recv_bytes`` only; no pickle crosses the process boundary.  The model
  goes to the worker as a file in a private temporary directory.

NNAPI is NHWC and ONNX's Conv is NCHW: the conv peer's graph takes and
returns the NHWC tensors nnburst does, with a Transpose on each side inside
the graph, so the timed call includes them, as it would for a user whose
data is NHWC.  The filters are transposed once, when the graph is built.

Needs ``pip install onnxruntime onnx`` (the ``peers`` extra: ``pip install '.[peers]'`` in the checkout) (onnxruntime and onnx); without them
the bench says so in one line and runs the other rows.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import IO, Any

import numpy as np

from ...service.launch import child_python, spawn, stop_process
from .runtime_paths import Workload

NOT_INSTALLED = "onnxruntime peers: not installed (pip install onnxruntime onnx, or '.[peers]' in nnburst's checkout)"
IN_PROCESS = "onnxruntime in-process"
VIA_PIPE = "onnxruntime via Pipe"
#: How the peers' sessions are configured (also written to --json).
SESSION = {
    "providers": ["CPUExecutionProvider"],
    "intra_op_num_threads": 1,
    "inter_op_num_threads": 1,
    "execution_mode": "sequential",
    "graph_optimization_level": "all (the default)",
}
OPSET = 17
IR_VERSION = 8  # the IR that goes with opset 17: loadable by any onnxruntime of the last years
START_TIMEOUT_S = 30.0
#: conv's tolerance against nnburst: float32 sums in another order
RTOL, ATOL = 1e-4, 1e-5


class PeerError(RuntimeError):
    """A peer could not run, or its output is not nnburst's: a failure row, not a number."""


REQUIRED = ("onnxruntime", "onnx")


def modules() -> tuple[Any, Any]:
    """``(onnx, onnxruntime)``, imported only when a peer runs.  onnxruntime's telemetry
    events are switched off: a benchmark should send nothing anywhere."""
    import onnx
    import onnxruntime

    if hasattr(onnxruntime, "disable_telemetry_events"):
        onnxruntime.disable_telemetry_events()
    return onnx, onnxruntime


def missing() -> str | None:
    """Why the peers cannot run here (None: they can), without importing them: onnxruntime
    (1.32 at least) writes a telemetry session file to $TMPDIR as it loads, which a run
    without peer rows should not do."""
    absent = []
    for name in REQUIRED:
        try:
            if importlib.util.find_spec(name) is None:
                absent.append(name)
        except (ImportError, ValueError):
            absent.append(name)
    return f"{NOT_INSTALLED}: no module {', '.join(absent)}" if absent else None


def versions() -> dict[str, str | None]:
    """The installed versions (None: not installed), from the loaded module or its metadata."""
    found: dict[str, str | None] = {}
    for name in REQUIRED:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if version is None and missing() is None:
            for dist in (name, f"{name}-gpu"):
                try:
                    version = importlib.metadata.version(dist)
                    break
                except importlib.metadata.PackageNotFoundError:
                    continue
        found[name] = version
    return found


# -- the models ---------------------------------------------------------------------------------


def onnx_model(model: str, work: Workload) -> bytes:
    """``work``'s model (``model`` is its runtime_paths name) as a serialized ONNX graph."""
    onnx, _ = modules()
    helper, TensorProto = onnx.helper, onnx.TensorProto
    inputs = [
        helper.make_tensor_value_info(f"input{i}", TensorProto.FLOAT, list(value.shape))
        for i, value in enumerate(work.inputs)
    ]
    output = helper.make_tensor_value_info("output", TensorProto.FLOAT, list(work.output.shape))
    if model == "add-mul":
        initializers = [onnx.numpy_helper.from_array(work.constants["c"], "c")]
        nodes = [
            helper.make_node("Add", ["input0", "input1"], ["summed"]),
            helper.make_node("Mul", ["summed", "c"], ["output"]),
        ]
    elif model == "conv":
        # NNAPI filters are [OC, KH, KW, IC]; ONNX wants [OC, IC, KH, KW].
        filters = np.ascontiguousarray(work.constants["weights"].transpose(0, 3, 1, 2))
        initializers = [
            onnx.numpy_helper.from_array(filters, "weights"),
            onnx.numpy_helper.from_array(work.constants["bias"], "bias"),
        ]
        nodes = [
            helper.make_node("Transpose", ["input0"], ["nchw"], perm=[0, 3, 1, 2]),
            # SAME padding for a 3x3 stride-1 kernel: one row/column on each side.
            helper.make_node(
                "Conv",
                ["nchw", "weights", "bias"],
                ["conv"],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
                strides=[1, 1],
            ),
            helper.make_node("Relu", ["conv"], ["relu"]),
            helper.make_node("MaxPool", ["relu"], ["pooled"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Transpose", ["pooled"], ["output"], perm=[0, 2, 3, 1]),
        ]
    else:
        raise ValueError(f"no onnxruntime peer for the model {model!r}")
    graph = helper.make_graph(nodes, f"nnburst-{model}", inputs, [output], initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    proto.ir_version = IR_VERSION
    onnx.checker.check_model(proto)
    data: bytes = proto.SerializeToString()
    return data


def session(model: bytes | str) -> Any:
    """An InferenceSession configured as :data:`SESSION` says."""
    _, ort = modules()
    options = ort.SessionOptions()
    options.intra_op_num_threads = SESSION["intra_op_num_threads"]
    options.inter_op_num_threads = SESSION["inter_op_num_threads"]
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model, options, providers=SESSION["providers"])


def check(name: str, got: np.ndarray, expected: np.ndarray, exact: bool) -> None:
    """Raise PeerError unless ``got`` is nnburst's output (bit for bit when ``exact``)."""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        raise PeerError(
            f"{name}: output {got.dtype}{list(got.shape)}, "
            f"nnburst's is {expected.dtype}{list(expected.shape)}"
        )
    same = (
        np.array_equal(got, expected) if exact else np.allclose(got, expected, rtol=RTOL, atol=ATOL)
    )
    if not same:
        worst = float(np.max(np.abs(got.astype(np.float64) - expected)))
        rule = "exactly" if exact else f"within rtol={RTOL:g}, atol={ATOL:g}"
        raise PeerError(f"{name}: output differs from nnburst's (max |diff| {worst:.3g}; {rule})")


# -- in-process ---------------------------------------------------------------------------------


@contextmanager
def in_process(model: str, work: Workload, expected: np.ndarray) -> Iterator[Callable[[], object]]:
    """``session.run`` of the peer model, its output checked against ``expected`` first."""
    try:
        ort_session = session(onnx_model(model, work))
        feeds = {f"input{i}": value for i, value in enumerate(work.inputs)}
        names = ["output"]
        first = ort_session.run(names, feeds)[0]
    except PeerError:
        raise
    except Exception as exc:  # onnx's and onnxruntime's own errors: a failure row
        raise PeerError(f"{IN_PROCESS}: {type(exc).__name__}: {exc}") from None
    check(IN_PROCESS, first, expected, exact=model == "add-mul")
    yield lambda: ort_session.run(names, feeds)[0]


# -- via Pipe -----------------------------------------------------------------------------------


@contextmanager
def via_pipe(
    model: str, work: Workload, expected: np.ndarray, cpu: int | None = None
) -> Iterator[Callable[[], object]]:
    """A round trip to a worker process holding the peer session: the inputs' bytes out,
    the output's bytes back; ``cpu`` pins the worker."""
    directory = tempfile.mkdtemp(prefix="nnburst-peer-")
    path = os.path.join(directory, f"{model}.onnx")
    try:
        try:
            with open(path, "wb") as file:
                file.write(onnx_model(model, work))
        except Exception as exc:
            raise PeerError(f"{VIA_PIPE}: {type(exc).__name__}: {exc}") from None
        outputs = [(work.output.dtype, work.output.shape)]
        with pipe_session(path, work.inputs, outputs, cpu) as call:
            check(VIA_PIPE, call(work.inputs)[0], expected, exact=model == "add-mul")
            yield lambda: call(work.inputs)[0]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def pipe_session(
    path: str,
    inputs: Sequence[np.ndarray],
    outputs: Sequence[tuple[np.dtype[Any], tuple[int, ...]]],
    cpu: int | None = None,
) -> Iterator[Callable[[Sequence[np.ndarray]], list[np.ndarray]]]:
    """A worker process holding an onnxruntime session on the model file ``path``.

    The worker is told each input's dtype and shape once (JSON); then a call
    sends the inputs' bytes, concatenated, and gets every output's bytes back,
    concatenated (``outputs``: the dtype and shape of each).  No pickle."""
    ours, theirs = Pipe()
    process: subprocess.Popen[str] | None = None
    sizes = [int(np.prod(shape)) * np.dtype(dtype).itemsize for dtype, shape in outputs]
    with tempfile.TemporaryFile() as stderr:
        try:
            process = spawn(
                child_python(__name__, "--fd", str(theirs.fileno()), path),
                stderr=stderr,
                pass_fds=[theirs.fileno()],
                cpu=cpu,
            )
            theirs.close()
            _wait_ready(ours, process, stderr)
            spec = [[str(x.dtype), list(x.shape)] for x in inputs]
            ours.send_bytes(json.dumps(spec).encode())

            def call(values: Sequence[np.ndarray]) -> list[np.ndarray]:
                ours.send_bytes(b"".join(np.ascontiguousarray(v).data for v in values))
                reply = ours.recv_bytes()
                results, start = [], 0
                for (dtype, shape), size in zip(outputs, sizes):
                    results.append(
                        np.frombuffer(
                            reply, dtype, size // np.dtype(dtype).itemsize, start
                        ).reshape(shape)
                    )
                    start += size
                return results

            try:
                call(inputs)  # the first call loads what the session loads lazily
            except (EOFError, OSError) as exc:
                why = f"{VIA_PIPE}: the worker is gone ({type(exc).__name__})"
                raise PeerError(_failed(why, stderr)) from None
            yield call
        finally:
            ours.close()
            theirs.close()
            if process is not None:
                _stop(process)


def _wait_ready(conn: Connection, process: subprocess.Popen[str], stderr: IO[bytes]) -> None:
    try:
        if not conn.poll(START_TIMEOUT_S):
            raise PeerError(
                _failed(f"{VIA_PIPE}: the worker was not ready in {START_TIMEOUT_S:g} s", stderr)
            )
        message = conn.recv_bytes()
    except (EOFError, OSError):
        code = process.wait(5)
        raise PeerError(
            _failed(f"{VIA_PIPE}: the worker exited with code {code} before it was ready", stderr)
        ) from None
    if message != b"ready":
        raise PeerError(f"{VIA_PIPE}: {message.decode('utf-8', 'replace')}")


def _failed(message: str, stderr: IO[bytes]) -> str:
    """``message`` and the end of the worker's stderr."""
    try:
        stderr.seek(0)
        tail = stderr.read().decode("utf-8", "replace").strip().splitlines()[-8:]
    except (OSError, ValueError):
        tail = []
    return "\n".join([message, *tail])


def _stop(process: subprocess.Popen[str]) -> None:
    """The worker ends when its end of the Pipe closes; SIGTERM, then SIGKILL, if not."""

    try:
        process.wait(2)
    except subprocess.TimeoutExpired:
        pass
    stop_process(process)


# -- the worker ---------------------------------------------------------------------------------


def serve(conn: Connection, path: str) -> None:
    """Take the inputs' dtypes and shapes (JSON), then answer each request (the
    inputs' bytes, concatenated) with every output's bytes, concatenated."""
    try:
        ort_session = session(path)
        names = [i.name for i in ort_session.get_inputs()]
    except Exception as exc:  # the parent reports it as the row's failure
        conn.send_bytes(f"the worker could not load {path}: {type(exc).__name__}: {exc}".encode())
        return
    conn.send_bytes(b"ready")
    try:
        spec = [(np.dtype(dtype), tuple(shape)) for dtype, shape in json.loads(conn.recv_bytes())]
    except (EOFError, OSError):
        return
    while True:
        try:
            request = conn.recv_bytes()
        except (EOFError, OSError):  # the bench closed its end
            return
        feeds, start = {}, 0
        for name, (dtype, shape) in zip(names, spec):
            count = int(np.prod(shape))
            feeds[name] = np.frombuffer(request, dtype, count, start).reshape(shape)
            start += count * dtype.itemsize
        results = ort_session.run(None, feeds)
        conn.send_bytes(b"".join(np.ascontiguousarray(r).data for r in results))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nnburst.tools.benchmarks.peers",
        description="The 'onnxruntime via Pipe' worker of nnburst bench (started by the bench).",
    )
    parser.add_argument("--fd", type=int, required=True, help="our end of the bench's Pipe")
    parser.add_argument("model", help="an ONNX model file")
    args = parser.parse_args(argv)
    conn = Connection(args.fd)
    try:
        serve(conn, args.model)
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
