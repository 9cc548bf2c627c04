"""``nnburst serve``: the driver service process's command line.

Parses the options (limits, emulated performance, workers), measures or
takes the sample devices' figures, then runs one :class:`~nnburst.service.driver.Service`
or, with several workers, a :class:`~nnburst.service.workers.WorkerPool`
whose workers run this module again on the inherited socket, until SIGTERM
or SIGINT.  Run with ``python -m nnburst.tools.serve [--socket PATH]``.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

from ..cpu.ops import arguments as op_arguments
from ..cpu.threads import checked_threads, limit_blas_threads, set_process_threads
from ..errors import BadDataError, NNError
from ..hal.burst_controller import CHANNEL_LENGTH
from ..hal.burst_server import MAX_CACHED_SLOTS
from ..hal.types import PerformanceInfo
from ..service import protocol
from ..service.driver import (
    FD_RESERVE,
    IDLE_TIMEOUT_S,
    MAX_CONNECTIONS,
    MAX_LONG_EXECUTIONS_PER_CONNECTION,
    MAX_MODEL_BYTES_PER_CONNECTION,
    MAX_MODELS_PER_CONNECTION,
    MAX_RECEIVING_BYTES,
    OPERAND_COST,
    OPERATION_COST,
    Limits,
    Service,
    listen,
    measure_figures,
    sample_devices,
    unlink_socket,
)
from ..service.launch import ServiceStartError
from ..service.wire import MAX_PAYLOAD
from ..service.workers import WorkerPool, default_worker_count


def parse_performance(text: str) -> tuple[str, PerformanceInfo]:
    """``DEVICE=TIME[/POWER]`` (ratios to the reference CPU, lower is better) for
    ``--emulate-performance``; POWER defaults to TIME."""
    name, sep, figures = text.partition("=")
    try:
        values = [float(v) for v in figures.split("/")]
        if (
            not sep
            or not name
            or len(values) not in (1, 2)
            or not all(0 < v < 1e30 for v in values)
        ):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected DEVICE=TIME[/POWER] with positive ratios, e.g. nnburst-sample-quant=0.5/0.4; got {text!r}"
        ) from None
    return name, PerformanceInfo(values[0], values[-1])


def _advice(exc: OSError) -> str:
    """What went wrong binding the socket, and what to do about it, in words."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "this user may not create it there; choose a directory you own with --socket PATH"
    if exc.errno == errno.ENAMETOOLONG or "too long" in str(exc):
        return "Unix socket paths are limited to 107 bytes; choose a shorter --socket PATH"
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a directory; choose another --socket PATH"
    if exc.errno == errno.EADDRINUSE:
        return "something else is bound there; stop it or choose another --socket PATH"
    return f"{exc.strerror or exc}; choose another --socket PATH"


def main(argv: Sequence[str] | None = None) -> int:
    """``nnburst serve``: run the service until SIGTERM / SIGINT."""
    parser = argparse.ArgumentParser(
        prog="nnburst serve", description="run a driver service process"
    )
    parser.add_argument(
        "--socket", help="socket path (default: $NNBURST_SOCKET or the per-user runtime directory)"
    )
    parser.add_argument(
        "--allow-uid", type=int, default=None, help="the uid allowed to connect (default: ours)"
    )
    parser.add_argument(
        "--emulate-performance",
        type=parse_performance,
        action="append",
        default=[],
        metavar="DEVICE=TIME[/POWER]",
        help="declare these ratios to the reference CPU instead of the measured ones, to try "
        "partitioning as if DEVICE were an accelerator (repeatable)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        metavar="N",
        help=f"clients served at once; more are refused (default {MAX_CONNECTIONS})",
    )
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        metavar="N",
        help="threads numpy's BLAS may use in the matmul-based kernels (default 1: the service "
        "shares the machine with its clients, and a second BLAS thread fights a burst client "
        "spinning on the other core; 0 keeps the BLAS library's own default)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="threads the C plan's convolutions may split over, this process's thread "
        "included (default 0: NNBURST_THREADS, else 1, as the service shares the machine's "
        "cores with its clients; results are the same bits whatever the count)",
    )
    parser.add_argument(
        "--max-models",
        type=int,
        default=MAX_MODELS_PER_CONNECTION,
        metavar="N",
        help=f"prepared models one connection may hold (default {MAX_MODELS_PER_CONNECTION})",
    )
    parser.add_argument(
        "--max-model-bytes",
        type=int,
        default=MAX_MODEL_BYTES_PER_CONNECTION,
        metavar="N",
        help="bytes the prepared models of one connection may take, as prepared: their "
        f"constants, {OPERAND_COST} per operand and {OPERATION_COST} per operation "
        f"(default {MAX_MODEL_BYTES_PER_CONNECTION})",
    )
    parser.add_argument(
        "--max-frame-bytes",
        type=int,
        default=MAX_PAYLOAD,
        metavar="N",
        help=f"the largest message a client may send, a model included (default {MAX_PAYLOAD})",
    )
    parser.add_argument(
        "--max-cached-memories",
        type=int,
        default=MAX_CACHED_SLOTS,
        metavar="N",
        help=f"memories one burst may keep mapped (default {MAX_CACHED_SLOTS})",
    )
    parser.add_argument(
        "--max-connection-memories",
        type=int,
        default=0,
        metavar="N",
        help="memories all bursts of one connection may keep mapped, one fd each (default 0: "
        f"a quarter of the process's open-file limit less {FD_RESERVE}; all connections "
        f"together stay within that limit less {FD_RESERVE})",
    )
    parser.add_argument(
        "--max-burst-channel",
        type=int,
        default=0,
        metavar="DATUMS",
        help="the longest request or result queue a burst may be configured with (default 0: "
        f"room for the model's longest request naming --max-cached-memories memories, and at "
        f"least {CHANNEL_LENGTH})",
    )
    parser.add_argument(
        "--max-receiving-bytes",
        type=int,
        default=MAX_RECEIVING_BYTES,
        metavar="N",
        help="bytes of messages this process receives at once from all its clients; a message "
        f"that does not fit is refused with OUT_OF_MEMORY (default {MAX_RECEIVING_BYTES}; "
        "per worker)",
    )
    parser.add_argument(
        "--max-long-executions",
        type=int,
        default=MAX_LONG_EXECUTIONS_PER_CONNECTION,
        metavar="N",
        help="executions of models with WHILE loops one connection may run at once; more are "
        f"refused with RESOURCE_EXHAUSTED_TRANSIENT (default {MAX_LONG_EXECUTIONS_PER_CONNECTION})",
    )
    parser.add_argument(
        "--max-tensor-bytes",
        type=int,
        default=op_arguments.MAX_TENSOR_BYTES,
        metavar="N",
        help="the most bytes one tensor may take when a request's values set its size (FILL, "
        f"TILE, PAD), checked before allocating (default {op_arguments.MAX_TENSOR_BYTES})",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=IDLE_TIMEOUT_S,
        metavar="SECONDS",
        help="close a connection that holds no model and no burst after this long without a "
        f"message (default {IDLE_TIMEOUT_S:g}; clients reconnect when they need the service)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="processes serving clients, each connection in one of them (default 0: one per "
        "core this process may use; 1 serves everything in this process)",
    )
    # Set by a supervisor for its workers only.
    parser.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--figures", type=_parse_figures, help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.blas_threads < 0:
        parser.error(f"--blas-threads must be 0 or more, got {args.blas_threads}")
    try:
        kernel_threads = checked_threads(args.threads, "--threads")
    except BadDataError as exc:
        parser.error(str(exc))
    for option in (
        "max_connections",
        "max_models",
        "max_model_bytes",
        "max_frame_bytes",
        "max_cached_memories",
        "max_tensor_bytes",
        "max_receiving_bytes",
        "max_long_executions",
    ):
        if getattr(args, option) < 1:
            flag = "--" + option.replace("_", "-")
            parser.error(f"{flag} must be at least 1, got {getattr(args, option)}")
    for option in ("max_connection_memories", "max_burst_channel"):
        if getattr(args, option) < 0:
            flag = "--" + option.replace("_", "-")
            parser.error(f"{flag} must be 0 (the default) or more, got {getattr(args, option)}")
    op_arguments.MAX_TENSOR_BYTES = args.max_tensor_bytes  # process-wide, for the service's life
    if not args.idle_timeout > 0:
        parser.error(
            f"--idle-timeout must be a positive number of seconds, got {args.idle_timeout}"
        )
    if args.workers < 0:
        parser.error(f"--workers must be 0 or more, got {args.workers}")
    # Process-wide, for the service's whole life (0: BLAS's own default).
    limit_blas_threads(args.blas_threads)
    set_process_threads(kernel_threads or None)  # 0: NNBURST_THREADS, else one
    path = args.socket or protocol.default_socket_path()
    logging.basicConfig(
        level=os.environ.get("NNBURST_LOG_LEVEL", "WARNING"), format="%(name)s: %(message)s"
    )
    workers = args.workers or default_worker_count()
    server: Service | WorkerPool
    try:
        figures = args.figures or measure_figures()
        devices = sample_devices(dict(args.emulate_performance), figures)
        limits = Limits(
            connections=args.max_connections,
            models=args.max_models,
            model_bytes=args.max_model_bytes,
            frame_bytes=args.max_frame_bytes,
            cached_memories=args.max_cached_memories,
            idle_timeout=args.idle_timeout,
            receiving_bytes=args.max_receiving_bytes,
            connection_memories=args.max_connection_memories,
            burst_channel=args.max_burst_channel,
            long_executions=args.max_long_executions,
        )
        if args.listen_fd is not None:
            listener = socket.socket(fileno=args.listen_fd)
            server = Service(path, devices, args.allow_uid, limits, listener)
        elif workers == 1:
            server = Service(path, devices, args.allow_uid, limits)
        else:
            server = WorkerPool(
                path,
                listen(path),
                workers,
                _worker_args(argv, figures, -(-args.max_connections // workers)),
            )
    except NNError as exc:
        print(f"nnburst serve: {exc.args[0]}", file=sys.stderr)
        return 1
    except ServiceStartError as exc:
        unlink_socket(path)
        print(f"nnburst serve: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"nnburst serve: cannot listen on {path}: {_advice(exc)}", file=sys.stderr)
        return 1

    def on_signal(signum: int, _frame: Any) -> None:
        server.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    print(f"listening on {path}", flush=True)
    try:
        server.serve_forever()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if isinstance(server, WorkerPool):
            unlink_socket(path)
    return 0


def _parse_figures(text: str) -> tuple[PerformanceInfo, PerformanceInfo]:
    """``FLOAT_TIME,FLOAT_POWER,QUANT_TIME,QUANT_POWER``: the supervisor's measurement."""
    f_time, f_power, q_time, q_power = (float(v) for v in text.split(","))
    return PerformanceInfo(f_time, f_power), PerformanceInfo(q_time, q_power)


def _worker_args(
    argv: Sequence[str],
    figures: tuple[PerformanceInfo, PerformanceInfo],
    max_connections: int,
) -> list[str]:
    """A worker's command line: the supervisor's own options (a later one wins,
    so each setting reaches the workers as given), then one process, the measured
    figures and the worker's share of the connections."""
    floats, quants = figures
    values = (floats.exec_time, floats.power_usage, quants.exec_time, quants.power_usage)
    return [
        *argv,
        "--workers",
        "1",
        "--max-connections",
        str(max_connections),
        "--figures",
        ",".join(repr(v) for v in values),
    ]


if __name__ == "__main__":
    sys.exit(main())
