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

x = helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 4])
b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
m = helper.make_model(
    helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Mul", ["t", "b"], ["y"])],
        "g",
        [x, b],
        [y],
    ),
    opset_imports=[helper.make_opsetid("", 17)],
)
s = nn_onnx.InferenceSession(m)
A = np.ones((3, 4), np.float32)
B = np.full((3, 4), 2, np.float32)
feed = {"a": A, "b": B}
s.run(None, feed)
(run,) = s._runners.values()
calls = {"runner": lambda: run(A, B), "session": lambda: s.run(None, feed)}
batches = {k: [] for k in calls}
for _ in range(300):
    for k, f in calls.items():
        t0 = time.perf_counter_ns()
        for _ in range(100):
            f()
        batches[k].append((time.perf_counter_ns() - t0) / 100 / 1000)
r, f = statistics.median(batches["runner"]), statistics.median(batches["session"])
print(
    f"median of 300 interleaved 100-call batches: Runner {r:.2f} us, InferenceSession.run {f:.2f} us, facade {f - r:.2f} us"
)
