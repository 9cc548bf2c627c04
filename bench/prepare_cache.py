"""The CPU driver's prepare of real models, uncached and from the compilation
cache, for two source trees side by side (say main and a branch).

Each round runs one process per (tree, model), the trees in alternating
order; a process loads the model once, writes its cache once, then times
``--per-round`` uncached prepares and as many cache hits, alternating.  The
table shows each tree's p50 over every round::

    python bench/prepare_cache.py --tree main=/path/to/main --tree new=. \\
        --model pose_detection.tflite --model det.onnx:x=1,3,160,224

A tree is a directory holding the ``nnburst`` package (with its built C
module); the processes import it through ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, tempfile, time
from nnburst import onnx, tflite
from nnburst.cpu.driver import cpu_device

path, shapes, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
if path.endswith(".tflite"):
    loaded = tflite.load(path)
else:
    loaded = onnx.load(path, input_shapes={k: tuple(v) for k, v in shapes.items()} or None)
model, device = loaded.model.hal_model, cpu_device()
cache = (tempfile.mkdtemp(), loaded.digest)
assert not device.prepare_model(model, cache=cache).cache_hit  # writes the cache
times = {"uncached": [], "cached": []}
for _ in range(count):
    start = time.perf_counter()
    device.prepare_model(model)
    times["uncached"].append(time.perf_counter() - start)
    start = time.perf_counter()
    assert device.prepare_model(model, cache=cache).cache_hit
    times["cached"].append(time.perf_counter() - start)
print(json.dumps(times))
"""


def _model(spec: str) -> tuple[str, dict[str, list[int]]]:
    """``path`` or ``path:name=d,d,...[;name=...]`` (ONNX input shapes)."""
    path, _, shapes = spec.partition(":")
    parsed = {}
    for item in filter(None, shapes.split(";")):
        name, _, dims = item.partition("=")
        parsed[name] = [int(d) for d in dims.split(",")]
    return path, parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIRECTORY")
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=3)
    args = parser.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree]
    models = [_model(m) for m in args.model]
    times: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as cwd:  # no tree on sys.path by accident
        for round_ in range(args.rounds):
            order = trees if round_ % 2 == 0 else trees[::-1]
            for path, shapes in models:
                for name, tree in order:
                    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
                    out = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            _CHILD,
                            path,
                            json.dumps(shapes),
                            str(args.per_round),
                        ],
                        env=env,
                        cwd=cwd,
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout
                    for kind, values in json.loads(out).items():
                        times.setdefault((os.path.basename(path), name, kind), []).extend(values)
    print(
        f"{'model':34} {'tree':8} {'uncached p50':>13} {'cache hit p50':>14} {'hit/uncached':>13}"
    )
    for path, _ in models:
        for name, _ in trees:
            model = os.path.basename(path)
            uncached = statistics.median(times[model, name, "uncached"]) * 1e3
            cached = statistics.median(times[model, name, "cached"]) * 1e3
            print(
                f"{model:34} {name:8} {uncached:10.1f} ms {cached:11.1f} ms {cached / uncached:12.2f}"
            )


if __name__ == "__main__":
    main()
