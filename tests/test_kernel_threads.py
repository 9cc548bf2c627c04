"""The kernel thread policy (nnburst/cpu/threads.py) through its options: an
Interpreter's ``num_threads``, ``SessionOptions.intra_op_num_threads``,
``NNBURST_THREADS`` and ``nnburst serve --threads``.  More threads give the
same bits; the workers exist while a facade holds them and are gone (no
nnb-kernel thread in /proc/self/task) once it closes; a forked child runs
on workers of its own; a process exits with its workers; bad counts are
refused naming the option."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnburst import tflite
from nnburst._bindings import threadpool
from nnburst.cpu import threads
from nnburst.errors import BadDataError
from tests.model_cache import wheel_member

ROOT = Path(__file__).resolve().parent.parent
PALM = "mediapipe/modules/palm_detection/palm_detection_lite.tflite"


def kernel_threads() -> int:
    """Threads of this process named as the pool names its workers."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
        except FileNotFoundError:  # a thread that just ended
            pass
    return sum(name.startswith("nnb-kernel-") for name in names)


@pytest.fixture(scope="module")
def palm() -> bytes:
    return wheel_member("mediapipe", "0.10.14", PALM).read_bytes()


def invoke(interpreter: tflite.Interpreter, x: np.ndarray) -> list[np.ndarray]:
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(o["index"]) for o in interpreter.get_output_details()]


def test_more_threads_give_the_same_bits_and_close_their_workers(palm: bytes) -> None:
    x = np.random.default_rng(1).uniform(0, 1, (1, 192, 192, 3)).astype(np.float32)
    one = tflite.Interpreter(model_content=palm, num_threads=1)
    alone = invoke(one, x)
    assert kernel_threads() == 0
    for count in (2, 3):
        many = tflite.Interpreter(model_content=palm, num_threads=count)
        for _ in range(3):
            got = invoke(many, x)
            assert [g.tobytes() for g in got] == [a.tobytes() for a in alone]
        assert threadpool.pool_count() == count
        assert kernel_threads() == count - 1  # the caller is the other one
        many._runner.close()  # type: ignore[union-attr]
        assert kernel_threads() == 0, "a closed runner left its workers"
        assert threadpool.pool_count() == 1
    del one, many
    gc.collect()


def test_a_runner_that_is_collected_gives_its_threads_back(palm: bytes) -> None:
    x = np.zeros((1, 192, 192, 3), np.float32)
    many = tflite.Interpreter(model_content=palm, num_threads=2)
    invoke(many, x)
    assert kernel_threads() == 1
    del many
    gc.collect()
    assert kernel_threads() == 0


@pytest.mark.parametrize("count", [-1, -5, threadpool.MAX_THREADS + 1, 10**6, "two", 2.5])
def test_bad_counts_are_refused_naming_the_option(palm: bytes, count: object) -> None:
    with pytest.raises(BadDataError, match="num_threads must be a thread count"):
        tflite.Interpreter(model_content=palm, num_threads=count)  # type: ignore[arg-type]
    with pytest.raises(BadDataError, match="SessionOptions.intra_op_num_threads must be"):
        threads.checked_threads(count, "SessionOptions.intra_op_num_threads")


def test_zero_and_none_mean_the_default() -> None:
    assert threads.checked_threads(0, "x") == threads.checked_threads(None, "x") == 0
    assert threads.checked_threads("3", "x") == 3
    assert threads.checked_threads(np.int64(2), "x") == 2


def test_a_session_takes_intra_op_num_threads() -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from nnburst import onnx as nn_onnx

    rng = np.random.default_rng(2)
    w1 = rng.normal(0, 1, (16, 8, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 1, (16, 1, 3, 3)).astype(np.float32)
    graph = helper.make_graph(  # a conv, then a depthwise one: one C plan
        [
            helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1], group=16),
        ],
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 48, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 48, 48])],
        [
            helper.make_tensor("w1", TensorProto.FLOAT, w1.shape, w1.ravel()),
            helper.make_tensor("w2", TensorProto.FLOAT, w2.shape, w2.ravel()),
        ],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    data.ir_version = 8
    raw = data.SerializeToString()
    x = rng.normal(0, 1, (1, 8, 48, 48)).astype(np.float32)
    results = []
    for count in (1, 2):
        options = nn_onnx.SessionOptions()
        options.intra_op_num_threads = count
        session = nn_onnx.InferenceSession(raw, options)
        results.append(session.run(None, {"x": x})[0])
        assert kernel_threads() == count - 1
        session.close()
        assert kernel_threads() == 0
    assert results[0].tobytes() == results[1].tobytes()
    options = nn_onnx.SessionOptions()
    options.intra_op_num_threads = -1
    with pytest.raises(BadDataError, match="SessionOptions.intra_op_num_threads"):
        nn_onnx.InferenceSession(raw, options)


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != threads.THREADS_ENV}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=environ, cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


_FORK = """
import os, numpy as np
from nnburst import tflite
from tests.model_cache import wheel_member
from tests.test_kernel_threads import PALM, invoke, kernel_threads
palm = wheel_member("mediapipe", "0.10.14", PALM).read_bytes()
x = np.random.default_rng(4).uniform(0, 1, (1, 192, 192, 3)).astype(np.float32)
alone = [o.copy() for o in invoke(tflite.Interpreter(model_content=palm, num_threads=1), x)]
many = tflite.Interpreter(model_content=palm, num_threads=3)
first = [o.copy() for o in invoke(many, x)]
assert kernel_threads() == 2
child = os.fork()
if child == 0:
    ok = kernel_threads() == 0  # the parent's workers are not here
    again = invoke(many, x)     # nor is a dead pool: the child starts its own
    ok = ok and kernel_threads() == 2
    ok = ok and all(a.tobytes() == b.tobytes() for a, b in zip(again, alone))
    os._exit(0 if ok else 3)
_, status = os.waitpid(child, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
again = invoke(many, x)
assert all(a.tobytes() == b.tobytes() for a, b in zip(first + again, alone + alone))
print("ok")
"""


def test_a_forked_child_runs_on_workers_of_its_own() -> None:
    done = run_python(_FORK)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


_ENV = """
import numpy as np
from nnburst import tflite
from nnburst._bindings import threadpool
from tests.model_cache import wheel_member
from tests.test_kernel_threads import PALM, invoke, kernel_threads
palm = wheel_member("mediapipe", "0.10.14", PALM).read_bytes()
interpreter = tflite.Interpreter(model_content=palm)  # not closed: exit ends its workers
invoke(interpreter, np.ones((1, 192, 192, 3), np.float32))
print(threadpool.pool_count(), kernel_threads())
"""


@pytest.mark.parametrize(("value", "expected"), [(None, "1 0"), ("0", "1 0"), ("2", "2 1")])
def test_nnburst_threads_sets_the_process_default(value: str | None, expected: str) -> None:
    done = run_python(_ENV, {} if value is None else {threads.THREADS_ENV: value})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


@pytest.mark.parametrize("value", ["-1", "65", "many"])
def test_a_bad_nnburst_threads_is_refused_naming_it(value: str) -> None:
    done = run_python(_ENV, {threads.THREADS_ENV: value})
    assert done.returncode != 0
    assert "NNBURST_THREADS must be a thread count" in done.stderr


_CACHED = """
import os
from nnburst import tflite
from tests.model_cache import wheel_member
from tests.test_kernel_threads import PALM
palm = wheel_member("mediapipe", "0.10.14", PALM).read_bytes()
tflite.Runner(palm, cache_dir=os.environ["CACHE_DIR"]).close()
"""


def test_a_bad_nnburst_threads_is_not_blamed_on_the_compilation_cache(tmp_path) -> None:
    """The count is checked before the cache is read: a cache hit must not log
    that a good entry "does not fit" (and prepare again) for the caller's error."""
    first = run_python(_CACHED, {"CACHE_DIR": str(tmp_path)})
    assert first.returncode == 0, first.stderr
    done = run_python(_CACHED, {"CACHE_DIR": str(tmp_path), threads.THREADS_ENV: "-1"})
    assert done.returncode != 0
    assert "NNBURST_THREADS must be a thread count" in done.stderr
    assert "does not fit" not in done.stderr


@pytest.mark.parametrize("value", ["-1", "1000"])
def test_serve_refuses_a_bad_threads_option(value: str) -> None:
    from nnburst.tools import serve

    with pytest.raises(SystemExit):
        serve.main(["--threads", value])


@pytest.mark.parametrize(
    "argv",
    [["bench", "--threads", "2"], ["bench", "fmq", "--threads", "2"]],
)
def test_bench_threads_applies_to_a_model_file_only(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    from nnburst.tools.cli import main

    assert main(argv) == 2
    assert "--threads applies to a model file" in capsys.readouterr().err


def test_the_model_bench_says_how_many_threads_its_rows_ran_on() -> None:
    from nnburst.tools.benchmarks import model_bench

    result = model_bench.Result("m.tflite", "LiteRT in-process", [], 1.0, None, [], {}, [], 1.0)
    assert "LiteRT in-process on one thread" in model_bench.head(result)
    result.threads = 2
    assert "LiteRT in-process and nnburst's kernels on 2 threads" in model_bench.head(result)


def descendants_kernel_threads() -> int:
    """nnb-kernel threads in the processes this one started (and theirs)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    mine = {os.getpid()}
    for _ in range(4):  # a service, its worker processes
        mine |= {pid for pid, parent in parents.items() if parent in mine}
    count = 0
    for pid in mine - {os.getpid()}:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                name = Path(f"/proc/{pid}/task/{task}/comm").read_text()
            except OSError:
                continue
            count += name.startswith("nnb-kernel-")
    return count


def test_a_service_runs_its_plans_on_its_threads_option(palm: bytes) -> None:
    from nnburst.tools.benchmarks.service_process import driver_service

    x = np.random.default_rng(6).uniform(0, 1, (1, 192, 192, 3)).astype(np.float32)
    with tflite.Runner(palm, cache_dir=None) as local:
        alone = local(x)
    with driver_service(threads=2) as device, tflite.Runner(palm, device, cache_dir=None) as far:
        for _ in range(3):
            got = far(x)
            assert [g.tobytes() for g in got] == [a.tobytes() for a in alone]
        assert descendants_kernel_threads() >= 1
    assert kernel_threads() == 0  # this process ran nothing on threads
