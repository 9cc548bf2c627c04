"""The ``nnburst`` command: what users run first.

Subcommands grow with the project; today: ``bench`` (FMQ and burst latency
against baselines).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _bench(args: argparse.Namespace) -> int:
    if args.what == "fmq":
        from .benchmarks import fmq_pingpong

        fmq_pingpong.main(iterations=args.iterations, stream_items=args.stream_items)
        return 0
    from .benchmarks import burst_latency

    burst_latency.main(iterations=args.iterations)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nnburst", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser("bench", help="latency and throughput against baselines, one run")
    bench.add_argument("what", nargs="?", choices=["burst", "fmq"], default="burst",
                       help="burst execution (default) or the raw FMQ")
    bench.add_argument("--iterations", type=int, default=20000, help="timed round trips per mode")
    bench.add_argument("--stream-items", type=int, default=2_000_000, help="elements in the streaming test")
    bench.set_defaults(run=_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
