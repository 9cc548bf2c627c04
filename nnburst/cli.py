"""The ``nnburst`` command: what users run first.

Subcommands: ``devices`` (what the runtime can compile for), ``bench`` (FMQ
and burst latency against baselines) and ``trace summarize`` (the per-layer
× per-phase timing table of a trace written by :mod:`nnburst.tracing`).
Bad input ends with a one-line message on stderr and a non-zero exit code,
not a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


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
    from .cpu.driver import CpuDevice
    from .cpu.registry import registered_codes
    from .devices import get_devices

    rows = []
    for device in get_devices():
        hal = device.hal
        if isinstance(hal, CpuDevice):
            operations: int | None = len(registered_codes())
            where = "in-process"
        else:
            # A device from another source says what it supports and where it runs itself.
            codes = getattr(hal, "supported_operation_codes", None)
            operations = len(codes()) if callable(codes) else None
            where = str(getattr(hal, "socket_path", None) or "unknown")
        rows.append({
            "name": device.name,
            "type": device.type.name,
            "version": device.version,
            "feature_level": device.feature_level,
            "operations": operations,
            "where": where,
        })
    return rows


def _devices(args: argparse.Namespace) -> int:
    rows = _device_rows()
    if args.json:
        _emit_json(rows)
        return 0
    if not rows:
        print("no devices found")
        return 0
    columns = [("name", "name"), ("type", "type"), ("version", "version"),
               ("feature_level", "feature level"), ("operations", "operations"), ("where", "runs")]
    text = [[("?" if row[key] is None else str(row[key])) for key, _ in columns] for row in rows]
    widths = [max(len(title), *(len(r[i]) for r in text)) for i, (_, title) in enumerate(columns)]
    print("  ".join(f"{title:<{w}}" for (_, title), w in zip(columns, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in text:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(r, widths)).rstrip())
    return 0


# -- bench -------------------------------------------------------------------------------------


def _writable(path: str) -> Path:
    """Checked before a long run, so a typo in the path does not throw the results away."""
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        raise CliError(f"--json {path}: is a directory")
    if not parent.is_dir():
        raise CliError(f"--json {path}: no directory {parent}")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise CliError(f"--json {path}: not writable")
    return target


def _bench(args: argparse.Namespace) -> int:
    target = _writable(args.json) if args.json else None
    if args.what == "fmq":
        from .benchmarks import fmq_pingpong

        if target is None:
            fmq_pingpong.main(iterations=args.iterations, stream_items=args.stream_items)
            return 0
        rows, streams = fmq_pingpong.run(args.iterations, args.stream_items)
        print(fmq_pingpong.report(rows, streams, args.iterations))
        stream_items: int | None = args.stream_items
    else:
        from .benchmarks import burst_latency
        from .benchmarks.stats import latency_table

        if target is None:
            burst_latency.main(iterations=args.iterations)
            return 0
        rows, streams, stream_items = burst_latency.run(args.iterations), [], None
        # The same text burst_latency.main prints, which returns nothing to serialize.
        print(f"ADD of two float32 [3, 4] tensors on the CPU reference driver, "
              f"{args.iterations} executions per mode:")
        print(latency_table(rows, baseline="multiprocessing.Pipe"))
    from .benchmarks import report

    document = report.build(args.what, rows, streams, iterations=args.iterations,
                            stream_items=stream_items)
    try:
        with open(target, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2, allow_nan=False)
            out.write("\n")
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot write {target}: {exc}") from None
    print(f"results written to {target}")
    return 0


# -- trace -------------------------------------------------------------------------------------


def _trace_summarize(args: argparse.Namespace) -> int:
    from . import tracing

    try:
        summary = tracing.summarize(tracing.load(args.file))
    except OSError as exc:
        raise CliError(f"cannot read the trace {args.file}: {exc.strerror or exc}") from None
    except tracing.TraceFormatError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        _emit_json(summary.as_dict())
    else:
        print(tracing.format_summary(summary))
    return 0


# -- the command -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nnburst", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    devices = commands.add_parser("devices", help="the devices the runtime can compile for")
    devices.add_argument("--json", action="store_true", help="print JSON instead of a table")
    devices.set_defaults(run=_devices)

    bench = commands.add_parser("bench", help="latency and throughput against baselines, one run")
    bench.add_argument("what", nargs="?", choices=["burst", "fmq"], default="burst",
                       help="burst execution (default) or the raw FMQ")
    bench.add_argument("--iterations", type=_positive, default=20000, help="timed round trips per mode")
    bench.add_argument("--stream-items", type=_positive, default=2_000_000,
                       help="elements in the streaming test")
    bench.add_argument("--json", metavar="FILE",
                       help="also write the results and the environment as JSON "
                            "(schema: nnburst/benchmarks/report.py)")
    bench.set_defaults(run=_bench)

    trace = commands.add_parser("trace", help="work with trace files written by nnburst.tracing")
    trace_commands = trace.add_subparsers(dest="trace_command", required=True)
    summarize = trace_commands.add_parser(
        "summarize", help="total time per layer and phase (Application, Runtime, IPC, Driver)"
    )
    summarize.add_argument("file", help="a trace file (NNBURST_TRACE=FILE or nnburst.tracing.start)")
    summarize.add_argument("--json", action="store_true", help="print JSON instead of a table")
    summarize.set_defaults(run=_trace_summarize)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (2 for bad arguments, 1 for other errors)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage and the problem
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args.run(args))
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
