"""The ``nnburst`` command: what users run first.

Subcommands: ``devices`` (what the runtime can compile for), ``bench`` (the
runtime's execution paths against a Pipe baseline by default; ``bench fmq``
and ``bench hal`` for the layers underneath) and ``trace summarize`` (the per-layer
× per-phase timing table of a trace written by :mod:`nnburst.tracing`).
Bad input ends with a one-line message on stderr and a non-zero exit code,
not a traceback.  Each subcommand imports what it needs when it runs, so
``nnburst --help`` does not pay for numpy, the drivers and the benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._version import __version__


class CliError(Exception):
    """A user-facing failure: printed as ``nnburst: error: <message>``, exit code 1."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _emit_json(document: Any) -> None:
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


# -- devices -----------------------------------------------------------------------------------


def _device_rows() -> list[dict[str, Any]]:
    from ..cpu.driver import CpuDevice
    from ..cpu.registry import registered_codes
    from ..devices import get_devices

    rows = []
    for device in get_devices():
        hal = device.hal
        # Only the reference driver lists its operations without a model to ask about.
        operations = len(registered_codes()) if isinstance(hal, CpuDevice) else None
        where = hal.location
        rows.append(
            {
                "name": device.name,
                "type": device.type.name,
                "version": device.version,
                "feature_level": device.feature_level,
                "operations": operations,
                "where": where,
            }
        )
    return rows


def _runner_class(path: str) -> Any:
    """The importer's Runner for a model file, by its suffix; a missing optional
    package (onnx) is a one-line error, not a traceback."""
    try:
        if path.endswith(".onnx"):
            from ..onnx import Runner as onnx_runner

            return onnx_runner
        from ..tflite import Runner as tflite_runner

        return tflite_runner
    except ImportError as exc:
        raise CliError(str(exc)) from None


def _input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=D,D,...`` (``--input-shape``)."""
    name, equals, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not equals or not name or not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=D,D,... (e.g. input=1,512), got {text!r}")
    return name, shape


def _constant(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (``--constant``): a number, or a .npy file."""
    name, equals, value = text.partition("=")
    if not equals or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE or NAME=FILE.npy, got {text!r}")
    return name, value


def _constant_value(name: str, value: str) -> Any:
    import numpy as np

    if value.endswith(".npy"):
        return _read_inputs([value])[0]
    try:
        return np.asarray(float(value) if any(c in value for c in ".eEn") else int(value))
    except ValueError:
        raise CliError(f"--constant {name}={value}: not a number or a .npy file") from None


def _read_inputs(files: Sequence[str]) -> list[Any]:
    import numpy as np

    arrays = []
    for file in files:
        try:
            arrays.append(np.load(file, allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise CliError(f"--input {file}: {exc}") from None
    return arrays


def _loaded_model(
    path: str,
    shapes: dict[str, tuple[int, ...]],
    constants: dict[str, str],
    arrays: Sequence[Any],
) -> Any:
    """The model file converted as asked: ONNX inputs fixed for good by
    ``--constant``, symbolic dimensions (a TFLite signature's -1) by
    ``--input-shape`` or else by the shapes of the ``--input`` arrays (given
    for the inputs left, in order)."""
    _runner_class(path)  # the importer is installed
    if not path.endswith(".onnx"):
        if constants:
            raise CliError("--constant: a TFLite model has no inputs to fix (ONNX models do)")
        from .. import tflite

        if not shapes and not arrays:
            return tflite.load(path)
        names = [i.name for i in tflite.load(path).inputs]
        unknown = sorted(set(shapes) - set(names))
        if unknown:
            raise CliError(
                f"--input-shape names no input of the model: {unknown} (inputs: {names})"
            )
        if arrays and len(arrays) != len(names):
            raise CliError(f"the model takes {len(names)} inputs, got {len(arrays)} --input")
        given = {name: tuple(array.shape) for name, array in zip(names, arrays)}
        return tflite.load(path, {**given, **shapes})
    from .. import onnx as nn_onnx

    names = nn_onnx.input_names(path)
    for option, named in (("--input-shape", shapes), ("--constant", constants)):
        unknown = sorted(set(named) - set(names))
        if unknown:
            raise CliError(f"{option} names no input of the model: {unknown} (inputs: {names})")
    left = [name for name in names if name not in constants]
    if arrays and len(arrays) != len(left):
        raise CliError(
            f"the model takes {len(left)} inputs ({', '.join(left)}), got {len(arrays)} --input"
        )
    given = {name: tuple(array.shape) for name, array in zip(left, arrays)}
    fixed = {name: _constant_value(name, value) for name, value in constants.items()}
    return nn_onnx.load(path, {**given, **shapes}, constants=fixed)


def _run(args: argparse.Namespace) -> int:
    """``nnburst run MODEL.tflite|.onnx``: one execution, its outputs summarized."""
    import numpy as np

    from ..errors import NNError

    runner_class = _runner_class(args.model)
    arrays = _read_inputs(args.input)
    try:
        loaded = _loaded_model(args.model, dict(args.input_shape), dict(args.constant), arrays)
        with runner_class(loaded, device=args.device) as runner:
            if arrays and len(arrays) != len(runner.inputs):
                raise CliError(
                    f"the model takes {len(runner.inputs)} inputs, got {len(arrays)} --input"
                )
            inputs = arrays or [np.zeros(info.shape, info.dtype) for info in runner.inputs]
            outputs = runner(*inputs)
            device = runner.compilation.device
            print(f"{args.model} on {device.name if device else 'several devices'}:")
            for info, value in zip(runner.outputs, outputs):
                checksum = float(np.asarray(value, np.float64).sum())
                print(
                    f"  {info.name or 'output'}: {list(value.shape)} {value.dtype} sum {checksum:.6g}"
                )
    except NNError as exc:
        raise CliError(str(exc.args[0] if exc.args else exc)) from None
    return 0


def _devices(args: argparse.Namespace) -> int:
    rows = _device_rows()
    if args.json:
        _emit_json(rows)
        return 0
    if not rows:
        print("no devices found")
        return 0
    columns = [
        ("name", "name"),
        ("type", "type"),
        ("version", "version"),
        ("feature_level", "feature level"),
        ("operations", "operations"),
        ("where", "runs"),
    ]
    text = [[("?" if row[key] is None else str(row[key])) for key, _ in columns] for row in rows]
    widths = [max(len(title), *(len(r[i]) for r in text)) for i, (_, title) in enumerate(columns)]
    print("  ".join(f"{title:<{w}}" for (_, title), w in zip(columns, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in text:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(r, widths)).rstrip())
    return 0


# -- bench -------------------------------------------------------------------------------------

#: Iterations per mode of the FMQ and HAL benchmarks when --iterations is not given.
LOW_LEVEL_ITERATIONS = 20000
STREAM_ITEMS = 2_000_000
_RUNTIME_ONLY = (
    "model",
    "conv_size",
    "duration",
    "paths",
    "placement",
    "pin",
    "busy",
    "plot",
    "html",
)


def _writable(path: str, option: str = "--json") -> Path:
    """Checked before a long run, so a typo in the path does not throw the results away."""
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        raise CliError(f"{option} {path}: is a directory")
    if not parent.is_dir():
        raise CliError(f"{option} {path}: no directory {parent}")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise CliError(f"{option} {path}: not writable")
    return target


def _write_text(target: Path, text: str) -> None:
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from None


def _write_json(target: Path, document: Any) -> None:
    try:
        text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    except ValueError as exc:
        raise CliError(f"cannot write {target}: {exc}") from None
    _write_text(target, text)


def _bench(args: argparse.Namespace) -> int:
    if args.clients is not None and args.what != "clients":
        raise _UsageError(f"--clients applies to nnburst bench clients, not to {args.what}")
    if args.models is not None:
        return _bench_models(args)
    if args.what == "runtime" and args.model is not None and args.model.endswith(_MODEL_FILES):
        return _bench_file(args)
    if args.input_shape or args.constant or args.threads is not None:
        option = (
            "--input-shape" if args.input_shape else "--constant" if args.constant else "--threads"
        )
        raise _UsageError(f"{option} applies to a model file (--model FILE.onnx)")
    if args.what == "runtime":
        return _bench_runtime(args)
    if args.what == "clients":
        return _bench_clients(args)
    given = [name for name in _RUNTIME_ONLY if getattr(args, name) is not None]
    if given:
        option = "--" + given[0].replace("_", "-")
        raise _UsageError(
            f"{option} applies to the runtime benchmark (nnburst bench), not to {args.what}"
        )
    # The FMQ and HAL benchmarks pin this process beside their peer: put it back,
    # for a caller that goes on (a test, a script calling main()).
    affinity = os.sched_getaffinity(0)
    try:
        return _bench_low_level(args)
    finally:
        os.sched_setaffinity(0, affinity)


def _bench_low_level(args: argparse.Namespace) -> int:
    """``nnburst bench fmq`` and ``nnburst bench hal``."""
    iterations = args.iterations or LOW_LEVEL_ITERATIONS
    target = _writable(args.json) if args.json else None
    if args.what == "fmq":
        from .benchmarks import fmq_pingpong

        items: int = args.stream_items or STREAM_ITEMS
        if target is None:
            fmq_pingpong.main(iterations=iterations, stream_items=items)
            return 0
        rows, streams = fmq_pingpong.run(iterations, items)
        stream_items: int | None = items
        print(fmq_pingpong.report(rows, streams, iterations))
    else:
        from .benchmarks import burst_latency
        from .benchmarks.stats import latency_table

        if target is None:
            burst_latency.main(iterations=iterations)
            return 0
        rows, streams, stream_items = burst_latency.run(iterations), [], None
        # The same text burst_latency.main prints, which returns nothing to serialize.
        print(
            f"ADD of two float32 [3, 4] tensors on the CPU reference driver, "
            f"{iterations} executions per mode:"
        )
        print(latency_table(rows, baseline="multiprocessing.Pipe", ratio_title="x Pipe"))
    from .benchmarks import report

    document = report.build(
        "burst" if args.what == "hal" else args.what,
        rows,
        streams,
        iterations=iterations,
        stream_items=stream_items,
    )
    _write_json(target, document)
    print(f"results written to {target}")
    return 0


def _bench_clients(args: argparse.Namespace) -> int:
    """Many client processes against one service, in one process and on every core."""
    from .benchmarks import clients

    given = [n for n in _RUNTIME_ONLY if n != "duration" and getattr(args, n) is not None]
    given += [n for n in ("iterations", "stream_items", "json") if getattr(args, n) is not None]
    if given:
        option = "--" + given[0].replace("_", "-")
        raise _UsageError(f"{option} does not apply to nnburst bench clients")
    counts = args.clients or clients.DEFAULT_CLIENTS
    seconds = args.duration or clients.DEFAULT_SECONDS
    print(
        f"add+mul bursts on {clients.DEVICE} for {seconds:g} s per row, each client its own "
        "process;\na service in one process, then one worker per core:"
    )
    print(clients.table(clients.run(counts, seconds)))
    return 0


def _client_counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(_positive(v) for v in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive client counts, got {text!r}"
        ) from None


def _runtime_settings(args: argparse.Namespace) -> Any:
    from .benchmarks import runtime_bench

    models = runtime_bench.MODELS if args.model in (None, "all") else (args.model,)
    duration = args.duration
    if duration is None and args.iterations is None:
        duration = runtime_bench.DEFAULT_DURATION_S
    return runtime_bench.Settings(
        models=tuple(models),
        conv_size=args.conv_size or runtime_bench.runtime_paths.DEFAULT_CONV_SIZE,
        iterations=args.iterations,
        duration=duration,
        paths=args.paths or runtime_bench.ALL_PATHS,
        placements=(args.placement,) if args.placement else runtime_bench.PLACEMENTS,
        pin=bool(args.pin),
        busy=bool(args.busy),
    )


_MODEL_FILES = (".tflite", ".onnx")


def _bench_model(text: str) -> str:
    if text in ("add-mul", "conv", "all") or text.endswith(_MODEL_FILES):
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} (choose from add-mul, conv, all, or a .tflite or .onnx file)"
    )


#: Options of the runtime benchmark that a model file has no use for: it has one
#: model, no conv, and its rows are fixed (model_bench).  Refused, and --help says so.
_NOT_FOR_FILES = ("conv_size", "paths", "placement", "pin", "busy", "stream_items")


def _bench_file(args: argparse.Namespace) -> int:
    """``--model FILE.tflite|.onnx``: the file on every path against its runtime (model_bench),
    with the runtime benchmark's --iterations, --duration, --json, --plot and --html."""
    from ..errors import NNError
    from .benchmarks import model_bench, plot, report
    from .benchmarks.service_process import ServiceError

    refused = [n for n in _NOT_FOR_FILES if getattr(args, n) is not None]
    if refused:
        option = {"placement": f"--{args.placement}"}.get(
            refused[0], "--" + refused[0].replace("_", "-")
        )
        raise _UsageError(f"{option} does not apply to a model file")
    if not os.path.isfile(args.model):
        raise CliError(f"--model {args.model}: no such file")
    _runner_class(args.model)  # the importer is installed
    targets = _output_targets(args)
    seconds = args.duration
    if seconds is None and args.iterations is None:
        seconds = model_bench.DEFAULT_DURATION_S
    try:
        constants = {n: _constant_value(n, v) for n, v in args.constant or []}
        shapes = dict(args.input_shape or [])
        result = model_bench.main(
            args.model, seconds, args.iterations, shapes, constants, args.threads or 1
        )
    except (NNError, ServiceError) as exc:
        raise CliError(str(exc.args[0] if exc.args else exc)) from None
    _write_files(
        report.build_model(result),
        lambda: plot.model_png(result),
        model_bench.head(result),
        targets,
    )
    return 0


def _bench_models(args: argparse.Namespace) -> int:
    """``--models DIR``: every model file in DIR against its runtime, one table."""
    from ..errors import NNError
    from .benchmarks import models_table

    given = [n for n in (*_RUNTIME_ONLY, "iterations", "json", "input_shape", "constant", "threads")
             if n != "duration" and getattr(args, n)]  # fmt: skip
    if args.what != "runtime" or given:
        option = "--" + given[0].replace("_", "-") if given else args.what
        raise _UsageError(f"{option} does not go with --models (only --duration does)")
    if not os.path.isdir(args.models):
        raise CliError(f"--models {args.models}: not a directory")
    try:
        models_table.main(args.models, args.duration or models_table.DEFAULT_SECONDS)
    except NNError as exc:
        raise CliError(str(exc.args[0] if exc.args else exc)) from None
    return 0


def _output_targets(args: argparse.Namespace) -> dict[str, Path]:
    """--json, --plot and --html, checked before the run."""
    from .benchmarks import plot

    targets = {
        option: _writable(path, option)
        for option, path in (("--json", args.json), ("--plot", args.plot), ("--html", args.html))
        if path
    }
    if "--plot" in targets and not plot.available():
        raise CliError(
            "--plot needs matplotlib: pip install matplotlib (or, from a source checkout, pip install '.[plot]')"
        )
    return targets


def _bench_runtime(args: argparse.Namespace) -> int:
    """The default: the runtime's paths on two models against a Pipe baseline (runtime_bench)."""
    from ..errors import NNError
    from .benchmarks import plot, report, runtime_bench
    from .benchmarks.progress import Progress
    from .benchmarks.service_process import ServiceError

    if args.stream_items is not None:
        raise _UsageError("--stream-items applies to nnburst bench fmq")
    targets = _output_targets(args)
    settings = _runtime_settings(args)
    cpus = runtime_bench.pin_cpus(settings.pin)
    key = runtime_bench.key(settings, cpus)
    print(runtime_bench.intro(settings), flush=True)
    try:
        with Progress(len(runtime_bench.plan(settings)) * runtime_bench.ROUNDS) as progress:
            result = runtime_bench.run(settings, progress)
    except (NNError, ServiceError, OSError) as exc:
        raise CliError(f"the benchmark failed: {exc}") from None
    print()
    if result.rows:
        print(runtime_bench.table(result))
    print(runtime_bench.summary(result))
    print()
    print(key, flush=True)
    _write_files(report.build_runtime(result), lambda: plot.png(result), key, targets)
    if result.interrupted:
        return 130
    return 1 if result.failures else 0


def _write_files(
    document: dict[str, Any], draw: Callable[[], bytes], key: str, targets: dict[str, Path]
) -> None:
    """The run's --json document, --plot image (``draw``) and --html page (with ``key``,
    what the numbers are, at its top)."""
    from .benchmarks import html_report, plot

    if "--json" in targets:
        _write_json(targets["--json"], document)
        print(f"results written to {targets['--json']}")
    image = draw() if ("--plot" in targets or "--html" in targets) and plot.available() else None
    if "--plot" in targets and image is not None:
        try:
            targets["--plot"].write_bytes(image)
        except OSError as exc:
            raise CliError(f"cannot write {targets['--plot']}: {exc.strerror or exc}") from None
        print(f"latency plot written to {targets['--plot']}")
    if "--html" in targets:
        _write_text(targets["--html"], html_report.render(document, key, image))
        print(f"report page written to {targets['--html']}")


class _UsageError(Exception):
    """A bad combination of arguments found after parsing: usage and exit code 2."""


def _duration(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def _conv_size(text: str) -> int:
    value = _positive(text)
    if not 2 <= value <= 512:
        raise argparse.ArgumentTypeError(f"expected a size from 2 to 512, got {value}")
    return value


def _paths(text: str) -> tuple[str, ...]:
    from .benchmarks.runtime_bench import ALL_PATHS

    chosen = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in ALL_PATHS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(ALL_PATHS)}, got {text!r}"
        )
    return tuple(p for p in ALL_PATHS if p in chosen)


# -- trace -------------------------------------------------------------------------------------


def _trace_summarize(args: argparse.Namespace) -> int:
    from . import trace_summary

    try:
        summary = trace_summary.summarize(trace_summary.load(args.file))
    except OSError as exc:
        raise CliError(f"cannot read the trace {args.file}: {exc.strerror or exc}") from None
    except trace_summary.TraceFormatError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        _emit_json(summary.as_dict())
    else:
        print(trace_summary.format_summary(summary))
    return 0


# -- the command -------------------------------------------------------------------------------


_DELEGATED = ("serve", "stress")


def _delegated(name: str, argv: list[str]) -> int:
    """``serve`` and ``stress`` are other modules' ``main(argv)``: they parse
    their own options (``nnburst serve --help``)."""
    if name == "serve":
        from . import serve

        return int(serve.main(argv))
    from .stress import run

    return int(run.main(argv))


DESCRIPTION = """\
Android Neural Networks (NNAPI) burst execution for Python: run models on the
in-process CPU driver or on devices in a driver service process, and measure
how long each way of executing takes."""

EPILOG = """\
examples:
  nnburst devices                 list the devices models can run on
  nnburst bench                   time every execution path (about 20 s)
  nnburst serve                   start a driver service (Ctrl-C stops it)
  nnburst stress --duration 30    concurrent executions with every result checked

Each command has its own --help.  Services are found through NNBURST_SERVICES
(socket paths joined by ':'); NNBURST_VLOG=all turns on verbose logs."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nnburst",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nnburst {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    devices = commands.add_parser(
        "devices", help="list the devices models can run on, and where they run"
    )
    devices.add_argument("--json", action="store_true", help="print JSON instead of a table")
    devices.set_defaults(run=_devices)

    run = commands.add_parser(
        "run",
        help="run a TFLite or ONNX model once and print its outputs' shapes and checksums",
        description="Load a .tflite or .onnx file, compile it for a device and run it through a "
        "burst. Inputs come from .npy files (in the model's input order), or are zeros. Each "
        "input's dtype must be the model's (or one that casts to it without changing a value).",
    )
    run.add_argument("model", metavar="MODEL.tflite|MODEL.onnx", help="the model file")
    run.add_argument("--device", metavar="NAME", help="a device name from `nnburst devices`")
    run.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="FILE.npy",
        help="an input, in the model's input order (repeatable); an ONNX model's symbolic "
        "dimensions take the array's shape",
    )
    run.add_argument(
        "--input-shape",
        action="append",
        default=[],
        type=_input_shape,
        metavar="NAME=D,D,...",
        help="fix an input's shape (repeatable; a TFLite model's -1 dimensions), e.g. "
        "--input-shape input=1,512; without "
        "--input files the inputs are zeros of these shapes",
    )
    run.add_argument(
        "--constant",
        action="append",
        default=[],
        type=_constant,
        metavar="NAME=VALUE",
        help="fix an ONNX input for good (repeatable): a number or a .npy file, e.g. --constant "
        "sr=16000; what depends on it alone is decided at load (an If keeps one branch), and "
        "--input gives the other inputs",
    )
    run.set_defaults(run=_run)

    bench = commands.add_parser(
        "bench",
        help="how long one execution takes on each path, against a Pipe baseline",
        description="Time executions through the NNAPI runtime's paths (sync, async, burst; in-process "
        "and across processes) against a multiprocessing.Pipe round trip of the same bytes, and, "
        "when onnxruntime is installed (pip install onnxruntime onnx), against onnxruntime running "
        "the same models in-process and in a worker process behind a Pipe (one session, one "
        "intra-op and one inter-op thread, sequential execution; outputs checked against "
        "nnburst's first). 'fmq' and 'hal' time the layers underneath.",
    )
    bench.add_argument(
        "what",
        nargs="?",
        choices=["runtime", "hal", "burst", "fmq", "clients"],
        default="runtime",
        help="runtime (default): the runtime's paths on two models; hal (alias burst): "
        "HAL-level bursts of one ADD; fmq: the raw queue; clients: many client processes "
        "bursting against one service (one process, then one worker per core)",
    )
    bench.add_argument(
        "--clients",
        type=_client_counts,
        metavar="LIST",
        help="clients: comma-separated client counts (default 1,8,32)",
    )
    bench.add_argument(
        "--iterations",
        type=_positive,
        default=None,
        help="timed executions per mode (runtime and a model file: bounded by count instead "
        f"of time; with --duration, whichever ends first; fmq/hal default {LOW_LEVEL_ITERATIONS})",
    )
    bench.add_argument(
        "--duration",
        type=_duration,
        metavar="SECONDS",
        help="seconds per mode (runtime: default 0.9, a model file: default 2, unless "
        "--iterations is given; with both, whichever ends first)",
    )
    bench.add_argument(
        "--model",
        type=_bench_model,
        metavar="{add-mul,conv,all,FILE.tflite,FILE.onnx}",
        help="a two-operation ADD+MUL model on 3x4 tensors, a 3x3 conv block, both (default), "
        "or a model file: TensorFlow Lite (timed against LiteRT; pip install ai-edge-litert) "
        "or ONNX (against onnxruntime; pip install onnx onnxruntime)",
    )
    bench.add_argument(
        "--models",
        metavar="DIR",
        help="every .tflite and .onnx file in DIR in process against its runtime (LiteRT, "
        "onnxruntime), one table with each kind's geometric mean; --duration is the seconds "
        "per model (default 2)",
    )
    bench.add_argument(
        "--threads",
        type=_positive,
        metavar="N",
        help="with a model file: kernel threads for every row (default 1): LiteRT's "
        "num_threads or onnxruntime's intra_op_num_threads, nnburst's runners' and its "
        "driver service's --threads",
    )
    bench.add_argument(
        "--input-shape",
        action="append",
        type=_input_shape,
        metavar="NAME=D,D,...",
        help="with a model file: fix an input's symbolic shape (repeatable), as nnburst run",
    )
    bench.add_argument(
        "--constant",
        action="append",
        type=_constant,
        metavar="NAME=VALUE",
        help="with an ONNX model file: fix an input for good (repeatable), as nnburst run",
    )
    bench.add_argument(
        "--conv-size",
        type=_conv_size,
        metavar="N",
        help="the conv model's input is [1, N, N, 16] (default 32; not with a model file)",
    )
    bench.add_argument(
        "--paths",
        type=_paths,
        metavar="LIST",
        help="comma-separated subset of sync,async,burst,onnxruntime (default: all; "
        "onnxruntime: the peer rows, when onnxruntime and onnx are installed; not with a "
        "model file, whose rows are fixed)",
    )
    placement = bench.add_mutually_exclusive_group()
    placement.add_argument(
        "--in-process",
        dest="placement",
        action="store_const",
        const="in-process",
        help="only the driver in this process (not with a model file)",
    )
    placement.add_argument(
        "--cross-process",
        dest="placement",
        action="store_const",
        const="cross-process",
        help="only the driver service process (not with a model file)",
    )
    bench.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="pin the timing thread and the other side to two CPUs (default: no; not with a "
        "model file)",
    )
    bench.add_argument(
        "--busy",
        action="store_true",
        default=None,
        help="run the Pipe baselines and the cross-process rows while one CPU-bound process "
        "per CPU spins (started and stopped by the bench; not with a model file)",
    )
    bench.add_argument(
        "--stream-items",
        type=_positive,
        default=None,
        help="elements in the fmq streaming test (default 2000000)",
    )
    bench.add_argument(
        "--json",
        metavar="FILE",
        help="also write the results and the environment as JSON "
        "(schema: nnburst/tools/benchmarks/report.py; not with clients)",
    )
    bench.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw the latency distributions (CDF per mode; needs matplotlib; runtime "
        "and a model file)",
    )
    bench.add_argument(
        "--html",
        metavar="FILE",
        help="also write a self-contained report page (table, plot, environment; runtime "
        "and a model file)",
    )
    bench.set_defaults(run=_bench, parser=bench)

    trace = commands.add_parser(
        "trace", help="summarize a trace recorded with NNBURST_TRACE=FILE.json"
    )
    trace_commands = trace.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    summarize = trace_commands.add_parser(
        "summarize", help="total time per layer and phase (Application, Runtime, IPC, Driver)"
    )
    summarize.add_argument(
        "file", help="a trace file (NNBURST_TRACE=FILE or nnburst.tracing.start)"
    )
    summarize.add_argument("--json", action="store_true", help="print JSON instead of a table")
    summarize.set_defaults(run=_trace_summarize)

    # Listed for --help; main() hands their arguments to their own parsers.
    commands.add_parser(
        "serve", help="run a driver service process: sample devices on a Unix socket"
    )
    commands.add_parser(
        "stress", help="concurrent bursts with fault injection: errors, mismatches, hangs, leaks"
    )
    return parser


class _InterruptRecord:
    """Remembers a SIGINT while a command runs.  Python raises KeyboardInterrupt
    wherever the main thread is, and one raised inside a fork handler or a
    finalizer (logging's after-fork lock release) is printed and dropped: the
    run then went on to exit 0.  The record makes it exit 130 all the same."""

    def __init__(self) -> None:
        self.seen = False
        self._previous: Any = None

    def _record(self, signum: int, frame: Any) -> None:
        self.seen = True
        signal.default_int_handler(signum, frame)

    def __enter__(self) -> _InterruptRecord:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (2 for bad arguments, 1 for other errors)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _DELEGATED:
        try:
            return _delegated(argv[0], argv[1:])
        except KeyboardInterrupt:
            return 130
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage and the problem
        return exc.code if isinstance(exc.code, int) else 2
    interrupted = _InterruptRecord()
    try:
        with interrupted:
            code = int(args.run(args))
        if interrupted.seen:  # a Ctrl-C Python swallowed (in a fork or a finalizer)
            raise KeyboardInterrupt
        return code
    except _UsageError as exc:
        args.parser.print_usage(sys.stderr)
        print(f"{args.parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"nnburst: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `nnburst trace summarize FILE --json | head`
        # Point stdout at /dev/null so the interpreter's final flush fails quietly too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
