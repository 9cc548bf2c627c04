"""``nnburst stress``: many concurrent bursts on random models, with faults on request.

Threads (and, with ``--processes``, child processes running this module with
``--child``) open bursts on random small models against the in-process CPU
device and one or more driver services, and check every result against an
in-process CPU-only compilation of the same model.  Faults are injected on
request: services killed and restarted, mutated request packets sent on raw
HAL bursts, memories closed mid-burst, request queues too small for the
request (synchronous fallback).

Everything is bounded (``--count``, ``--duration``) and every blocking call
is watched: a call that outlives ``--hang-timeout`` is counted as a hang and
its burst closed to release it, never waited on forever.  The exit code is 0
only if there were no mismatches, hangs, leaks or unclean failures
(exceptions other than NNError, accepted mutated packets).

Children get their parameters on the command line and print their summary
as JSON on stdout: nothing is pickled.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from nnburst.service.launch import child_env, child_python, neutral_cwd
from nnburst.service.remote import connect

from .monitor import Budget, LeakCheck, Stats, Watchdog
from .services import SERVICE_START_TIMEOUT_S, ServiceKiller, ServiceProcess, Target
from .worker import Options, Worker

# -- children -----------------------------------------------------------------------------------


def _child_command(args: argparse.Namespace, paths: list[str], index: int, count: int) -> list[str]:
    command = child_python(
        "nnburst.tools.stress.run",
        "--child",
        "--threads",
        str(args.threads),
        "--count",
        str(count),
        "--duration",
        str(args.duration),
        "--seed",
        str(args.seed + 1000 * (index + 1)),
        "--hang-timeout",
        str(args.hang_timeout),
        "--max-size",
        str(args.max_size),
        "--max-operations",
        str(args.max_operations),
    )
    for path in paths:
        command += ["--socket", path]
    for flag in ("mutate_packets", "free_memories", "shrink_queues", "no_cpu"):
        if getattr(args, flag):
            command.append("--" + flag.replace("_", "-"))
    return command


def _collect_child(
    process: subprocess.Popen[str], timeout: float, stats: Stats, interrupted: bool = False
) -> None:
    """Merge a worker process's JSON summary; one without a summary failed (unless we
    interrupted it before it was ready)."""
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        stats.add("hangs")
        stats.note(f"hang: worker process {process.pid} did not finish")
        return
    try:
        stats.merge(json.loads(out.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        if not interrupted:
            stats.count("unclean", "ChildFailed")
        stats.note(f"worker process {process.pid} exited {process.returncode} without a summary")


# -- the run ------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nnburst stress",
        description="Many concurrent bursts on random models against driver services and the "
        "in-process CPU device, every result checked; faults on request.",
    )
    parser.add_argument(
        "--duration", type=_seconds, default=10.0, help="seconds to run (default 10)"
    )
    parser.add_argument(
        "--count",
        type=_positive,
        default=100_000,
        help="at most this many executions (default 100000)",
    )
    parser.add_argument(
        "--threads", type=_positive, default=4, help="worker threads per process (default 4)"
    )
    parser.add_argument(
        "--processes",
        type=_non_negative,
        default=0,
        help="extra worker processes, each with --threads threads (default 0)",
    )
    parser.add_argument(
        "--services",
        type=_non_negative,
        default=1,
        help="driver services to start when no --socket is given (default 1)",
    )
    parser.add_argument(
        "--socket",
        action="append",
        default=[],
        metavar="PATH",
        help="use the running service at PATH instead of starting one (repeatable)",
    )
    parser.add_argument("--no-cpu", action="store_true", help="leave out the in-process CPU device")
    parser.add_argument(
        "--kill-service", action="store_true", help="kill and restart services at random times"
    )
    parser.add_argument(
        "--mutate-packets",
        action="store_true",
        help="send mutated request packets on raw HAL bursts",
    )
    parser.add_argument(
        "--free-memories",
        action="store_true",
        help="close memories mid-burst and continue with new ones",
    )
    parser.add_argument(
        "--shrink-queues",
        action="store_true",
        help="request channels too short for most requests (synchronous fallback)",
    )
    parser.add_argument(
        "--hang-timeout",
        type=_seconds,
        default=10.0,
        help="a call taking longer than this counts as a hang (default 10 s)",
    )
    parser.add_argument(
        "--max-size",
        type=_positive,
        default=8,
        help="largest height/width of a model's tensors (default 8)",
    )
    parser.add_argument(
        "--max-operations", type=_positive, default=5, help="longest operation chain (default 5)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="random seed (default: from the clock)"
    )
    parser.add_argument(
        "--json", metavar="FILE", help="also write the summary as JSON to FILE ('-' for stdout)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser


#: How long a worker process waits for a service that --kill-service is restarting.
CHILD_CONNECT_PATIENCE_S = 15.0


def _answers(path: str, patient: bool) -> bool:
    """Whether a service answers at ``path``; a worker process (``patient``) waits
    out a restart by --kill-service instead of failing the run."""
    deadline = time.monotonic() + (CHILD_CONNECT_PATIENCE_S if patient else 0.0)
    while connect(path) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _run(args: argparse.Namespace, stats: Stats, leaks: LeakCheck) -> None:
    workdir = None
    services: list[ServiceProcess] = []
    targets: list[Target] = []
    children: list[subprocess.Popen[str]] = []
    workers: list[Worker] = []
    killer: ServiceKiller | None = None
    watchdog: Watchdog | None = None
    budget = Budget(args.count, args.duration)
    child_pids: set[int] = set()
    try:
        try:
            paths = list(args.socket)
            for path in paths:
                if not _answers(path, patient=args.child):  # the warning above says why
                    raise RuntimeError(f"--socket {path}: no driver service answers there")
            if not paths and not args.child and args.services:
                workdir = tempfile.mkdtemp(prefix="nnburst-stress-")
                for i in range(args.services):
                    services.append(
                        ServiceProcess(os.path.join(workdir, f"service{i}", "driver.sock"))
                    )
                paths = [s.path for s in services]
            if not args.no_cpu:
                targets.append(Target("cpu"))
            targets += [Target(f"service{i}", path) for i, path in enumerate(paths)]
            per_process = args.count // (args.processes + 1)
            # The clock starts once the services listen.
            budget = Budget(args.count - per_process * args.processes, args.duration)
            watchdog = Watchdog(args.hang_timeout, stats)
            for i in range(args.processes):
                children.append(
                    subprocess.Popen(
                        _child_command(args, paths, i, max(1, per_process)),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        text=True,
                        env=child_env(),
                        cwd=neutral_cwd(),
                        start_new_session=True,
                    )
                )
            workers = [
                Worker(
                    i,
                    args.seed + i,
                    targets,
                    budget,
                    watchdog,
                    stats,
                    Options(
                        args.max_size,
                        args.max_operations,
                        args.mutate_packets,
                        args.free_memories,
                        args.shrink_queues,
                    ),
                )
                for i in range(args.threads)
            ]
            for worker in workers:
                worker.thread.start()
            if not args.child:  # a long run says it started, and how to stop it
                print(
                    f"nnburst stress: running up to {args.duration:g} s; "
                    "Ctrl-C stops it with a summary",
                    file=sys.stderr,
                    flush=True,
                )
            if args.kill_service and services:
                killer = ServiceKiller(
                    services, {t.path: t for t in targets if t.path}, budget, stats, args.seed
                )
                killer.thread.start()
            while any(w.thread.is_alive() for w in workers):
                time.sleep(0.05)  # the main thread stays free for Ctrl-C
            for process in children:
                _collect_child(process, args.duration + args.hang_timeout + 30, stats)
        except KeyboardInterrupt:
            stats.interrupted = True
            budget.stop.set()
            for process in children:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGINT)  # each prints its partial summary
            for process in children:
                if process.returncode is None:
                    _collect_child(process, args.hang_timeout + 10, stats, interrupted=True)
    finally:
        budget.stop.set()
        for worker in workers:
            worker.thread.join(args.hang_timeout + 5)
            if worker.thread.is_alive():
                stats.add("hangs")
                stats.note(f"hang: {worker.thread.name} did not stop")
        if killer is not None:
            killer.thread.join(SERVICE_START_TIMEOUT_S + 5)
            killer.finish()
        for process in children:
            child_pids.add(process.pid)
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        for target in targets:
            target.close()
        for service in services:
            service.stop()
            child_pids.update(service.pids)
        if watchdog is not None:
            watchdog.close()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        leaks.measure(child_pids, stats)


def verdict(stats: Stats) -> str:
    """FAIL on any failure; an interrupted run has not passed, whatever it saw."""
    if not stats.passed:
        return "FAIL"
    return "INTERRUPTED (no failure before it)" if stats.interrupted else "PASS"


def format_summary(stats: Stats, args: argparse.Namespace) -> str:
    doc = stats.to_json()
    by_target = ", ".join(f"{k} {v}" for k, v in sorted(doc["by_target"].items())) or "none"
    errors = sum(doc["errors"].values())
    lines = [
        f"nnburst stress: {doc['seconds']:.1f} s, {args.threads} threads x {stats.processes} processes, "
        f"seed {args.seed}" + (" (interrupted)" if stats.interrupted else ""),
        f"  executions   {doc['executions']:>8}   ({by_target}; {doc['sessions']} bursts/models)",
        f"  errors       {errors:>8}",
        *(f"    {k:<28} {v}" for k, v in sorted(doc["errors"].items())),
        f"  mismatches   {doc['mismatches']:>8}",
        f"  hangs        {doc['hangs']:>8}",
        f"  leaks        {doc['leak_total']:>8}   (shm {doc['leaks']['shm']}, processes {doc['leaks']['processes']}, "
        f"threads {doc['leaks']['threads']}, fds {doc['leaks']['fds']})",
    ]
    if doc["unclean"]:
        lines.append(
            f"  unclean      {sum(doc['unclean'].values()):>8}   "
            + ", ".join(f"{k} {v}" for k, v in sorted(doc["unclean"].items()))
        )
    faults = []
    if args.kill_service:
        faults.append(f"kill-service: {doc['restarts']} restarts, {doc['unrecovered']} unrecovered")
    if args.mutate_packets:
        faults.append(
            f"mutate-packets: {doc['packets_mutated']} sent, {doc['mutations_accepted']} accepted"
        )
    if args.free_memories:
        faults.append(f"free-memories: {doc['memories_freed']} closed mid-burst")
    if args.shrink_queues:
        faults.append(f"shrink-queues: {doc['fallbacks']} synchronous fallbacks")
    lines += [f"  fault        {f}" for f in faults]
    lines += [f"  ! {d}" for d in doc["details"][:10]]
    lines.append("  result       " + verdict(stats))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``nnburst stress``; returns the exit code: 0 when the whole run saw no
    mismatch, hang, leak or unclean failure, 1 when it saw one, 130 when it was
    interrupted before its end without one."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = int(time.time()) % 100_000
    if args.kill_service and (args.socket or args.child or args.services == 0):
        parser.error("--kill-service needs services this run starts (no --socket, --services >= 1)")
    if args.no_cpu and not args.socket and args.services == 0:
        parser.error("no targets: --no-cpu with --services 0")
    stats = Stats()
    leaks = LeakCheck()
    start = time.monotonic()
    in_main = threading.current_thread() is threading.main_thread()
    try:
        _run(args, stats, leaks)
    except KeyboardInterrupt:  # a second Ctrl-C during cleanup: what is left is reported as leaks
        stats.interrupted = True
    except (RuntimeError, OSError) as exc:
        print(f"nnburst stress: error: {exc}", file=sys.stderr)
        return 2
    stats.seconds = time.monotonic() - start
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
    try:
        doc = stats.to_json()
        if args.child:
            print(json.dumps(doc), flush=True)
        else:
            print(format_summary(stats, args), flush=True)
        if args.json == "-" and not args.child:
            print(json.dumps(doc, indent=2))
        elif args.json and args.json != "-":
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if not stats.passed:
        return 1
    return 130 if stats.interrupted else 0  # 130: as a shell reports a Ctrl-C


if __name__ == "__main__":
    sys.exit(main())
