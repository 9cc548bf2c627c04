"""What InferenceSession.run adds over the Runner it wraps, on ADD+MUL (3x4).

    python bench/facade_overhead.py

Both are called in 100-call batches taking turns, 300 times; the medians are
compared, so a drifting machine slows both alike.
"""

import statistics
import time

import numpy as np
from onnx import TensorProto, helper

from nnburst import onnx as nn_onnx


def add_mul() -> object:
    a, b = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 4]) for n in "ab")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    nodes = [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Mul", ["t", "b"], ["y"])]
    graph = helper.make_graph(nodes, "add_mul", [a, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> None:
    session = nn_onnx.InferenceSession(add_mul())
    a, b = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32)
    feed = {"a": a, "b": b}
    session.run(None, feed)
    (runner,) = session._runners.values()  # the Runner the session calls
    calls = {
        "Runner": lambda: runner(a, b),
        "InferenceSession.run": lambda: session.run(None, feed),
    }
    batches: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(300):
        for name, call in calls.items():
            start = time.perf_counter_ns()
            for _ in range(100):
                call()
            batches[name].append((time.perf_counter_ns() - start) / 100 / 1000)
    plain, facade = (statistics.median(batches[name]) for name in calls)
    print(
        f"Runner {plain:.2f} us, InferenceSession.run {facade:.2f} us: the facade adds {facade - plain:.2f} us"
    )


if __name__ == "__main__":
    main()
