"""Two checkouts of nnburst on the same models, against the same peers, in one run.

    python bench/before_after.py BEFORE_TREE AFTER_TREE MODELS_DIR [--rounds 3] [--seconds 1]

Each round runs every model once per tree, the trees alternating, each in a
fresh process with that tree first on the import path (its compiled module
built in place: ``python csrc/build_ffi.py``).  A process times the model's
in-process Runner (one execution per call, no burst) and its peer (LiteRT or
onnxruntime, one thread) in alternating slices, so each ratio compares two
things measured under the same load; the table gives each tree's median
ratio over the rounds, and each kind's geometric mean.  ``MODELS_DIR/models.json``
gives ONNX shapes and constants, as ``nnburst bench --models`` reads it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
import numpy as np
import threadpoolctl
path, seconds, setting = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
threadpoolctl.threadpool_limits(1, "blas")
rng = np.random.default_rng(0)
if path.endswith(".onnx"):
    import onnxruntime
    from nnburst import onnx as importer
    loaded = importer.load(path, setting.get("input_shapes"), constants=setting.get("constants"))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    fixed = {}
    for i in session.get_inputs():
        if i.name in (setting.get("constants") or {}):
            kind = np.int64 if "int64" in i.type else np.float32
            fixed[i.name] = np.array(setting["constants"][i.name], kind)
    names = [i.name for i in loaded.inputs]
    peer = lambda *xs: session.run(None, {**dict(zip(names, xs)), **fixed})
else:
    from ai_edge_litert.interpreter import Interpreter
    from nnburst import tflite as importer
    loaded = importer.load(path)
    interpreter = Interpreter(model_path=path, num_threads=1)
    interpreter.allocate_tensors()
    def peer(*xs):
        for d, x in zip(interpreter.get_input_details(), xs):
            interpreter.set_tensor(d["index"], x)
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
inputs = []
for info in loaded.inputs:
    if np.issubdtype(info.dtype, np.floating):
        inputs.append(rng.uniform(-1, 1, info.shape).astype(info.dtype))
    else:
        info_range = np.iinfo(info.dtype)
        inputs.append(rng.integers(max(info_range.min, -128), min(info_range.max, 127) + 1, info.shape).astype(info.dtype))
runner = importer.Runner(loaded, "nnburst-reference", burst=False, cache_dir=None)
times = {"peer": [], "nnburst": []}
calls = {"peer": lambda: peer(*inputs), "nnburst": lambda: runner(*inputs)}
for call in calls.values():
    call()
turn = seconds / 10
for _ in range(10):
    for name, call in calls.items():
        end = time.perf_counter() + turn
        while True:
            start = time.perf_counter_ns()
            call()
            times[name].append(time.perf_counter_ns() - start)
            if time.perf_counter() > end:
                break
print(json.dumps({k: float(np.median(v)) / 1000 for k, v in times.items()}))
"""


def measure(tree: Path, model: Path, seconds: float, setting: dict) -> dict | str:
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("NNBURST_SERVICES", None)
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), str(seconds), json.dumps(setting)],
        env=env, cwd=tree, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if result.returncode != 0:
        return result.stderr.strip().splitlines()[-1][:70]
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("models", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    settings_path = args.models / "models.json"
    settings = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    models = sorted(p for p in args.models.iterdir() if p.suffix in (".tflite", ".onnx"))
    trees = {"before": args.before, "after": args.after}
    runs: dict[tuple[str, str], list[dict]] = {}
    failures: dict[tuple[str, str], str] = {}
    for _ in range(args.rounds):
        for model in models:
            for label, tree in trees.items():
                got = measure(tree, model, args.seconds, settings.get(model.name, {}))
                if isinstance(got, str):
                    failures[label, model.name] = got
                else:
                    runs.setdefault((label, model.name), []).append(got)
    width = max(len(m.name) for m in models)
    print(f"{'model':<{width}}  {'peer µs':>9}  {'before µs':>10}  {'x peer':>6}  "
          f"{'after µs':>9}  {'x peer':>6}")  # fmt: skip
    ratios: dict[tuple[str, str], list[float]] = {}
    for model in models:
        cells = []
        peers = []
        for label in trees:
            rounds = runs.get((label, model.name))
            if not rounds:
                cells.append(f"{failures.get((label, model.name), 'failed'):>18}")
                continue
            ratio = statistics.median(r["nnburst"] / r["peer"] for r in rounds)
            ratios.setdefault((label, model.suffix), []).append(ratio)
            peers += [r["peer"] for r in rounds]
            cells.append(f"{statistics.median(r['nnburst'] for r in rounds):>10.1f}  {ratio:>6.2f}")
        peer = f"{statistics.median(peers):>9.1f}" if peers else f"{'':>9}"
        print(f"{model.name:<{width}}  {peer}  " + "  ".join(cells))
    for suffix in (".tflite", ".onnx"):
        means = []
        for label in trees:
            values = ratios.get((label, suffix), [])
            if values:
                means.append(f"{label} {math.exp(statistics.fmean(map(math.log, values))):.2f}x")
        if means:
            print(f"geometric mean of the ratios, {suffix}: " + ", ".join(means))


if __name__ == "__main__":
    main()
