#!/usr/bin/env python3
"""Mutation testing for nnburst: do the tests catch what they claim?

Python: mutmut over a few modules, each against its own fast test subset
(GROUPS).  C: a short scripted list of mutants of ``csrc/`` (C_MUTANTS), each
applied, compiled, run against the FMQ tests and reverted.  Everything runs
in temporary copies of the tree: the checkout this is started from is only
read, so it is safe while others work in it.

The run ends with one line ``killed K of N mutants (P %)``, after listing
the survivors.  Mutants listed in ``equivalent.txt`` (with the reason they
cannot change behaviour) are left out of N.  mutmut's "no tests" (no test
of the subset reaches the function), "suspicious" and "skipped" count as
survivors; timeouts and crashes count as killed.

Usage: ``tox -e mutants`` or ``python tools/mutants/run.py [--only fmq,c] [--jobs 2]``.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EQUIVALENT = HERE / "equivalent.txt"

#: Copied into each work tree: the sources, the tests, the build files.
COPY = ["nnburst", "tests", "csrc", "pyproject.toml", "setup.py"]
#: Never copied (build output, caches, other sessions' mutmut runs).
IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.so", "*.o", "_native.c", "mutants", "bin", ".hypothesis"
)

#: Tags the shared-memory segments of every test run here (nnburst/shm.py):
#: a killed mutant's leftovers then never count as leaks of a normal test run
#: going on at the same time, whose leak guard only sees untagged segments.
SHM_TAG = {"NNBURST_SHM_TAG": "mutant"}

PYTEST_ARGS = ["-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:unraisableexception", "-q"]


@dataclass(frozen=True)
class Group:
    """Modules mutated together and the fast tests that must catch them.

    ``focus``, when set, is a regular expression on mutant names: only the
    functions it matches are scored (the rest of the module is reported as
    out of scope, e.g. encoders whose tests run in other processes, where
    mutmut cannot see which test reached them)."""

    mutate: tuple[str, ...]
    tests: tuple[str, ...]
    focus: str | None = None
    #: mutmut name patterns (fnmatch): only these mutants are run at all, e.g. the
    #: binding functions of every op module; the others are left "not checked".
    names: tuple[str, ...] = ()
    #: files under ``mutate`` left alone (fnmatch)
    exclude: tuple[str, ...] = ()
    #: regular expressions: a statement starting on a matching line is not mutated
    #: (an importer's refusal messages: their wording is not what the group checks)
    skip_lines: tuple[str, ...] = ()


#: Lines of the importers that only word a refusal (see Group.skip_lines).
IMPORTER_MESSAGES = (r"^\s*raise ", r"^\s*return _Unsupported\(", r"^\s*log\.")
#: The importers' scored mutants: module-level functions (the mappers and their
#: helpers), not the Converter's methods (``names`` leaves them unrun) nor the
#: functions that only word what is unsupported or describe a model's tensors.
MAPPERS_ONLY = r"\.x_(?!_unsupported__|describe__)"

GROUPS = {
    "fmq": Group(
        ("nnburst/fmq.py",),
        (
            "tests/test_fmq.py",
            "tests/test_fmq_unsync.py",
            "tests/test_fmq_corruption.py",
            "tests/test_fmq_model.py",
            "tests/test_event_flag.py",
            "tests/test_fmq_ipc.py",
            "tests/test_fmq_edges.py",
        ),
    ),
    "hal": Group(
        ("nnburst/hal/packets.py",),
        ("tests/test_packets.py", "tests/test_packet_fuzz.py", "tests/test_packet_errors.py"),
    ),
    "service": Group(
        ("nnburst/service/protocol.py", "nnburst/service/burst.py"),
        ("tests/test_service_decoders.py", "tests/test_service_get_memories.py"),
        focus=r"(decode|_read_|Reader|_check_indexes|_fetch|get_memories)",
    ),
    # The burst server, controller and slot cache: their tests run real
    # bursts (about 30 s a pass), so this group takes hours; not in the default run.
    "hal-full": Group(
        ("nnburst/hal/*.py",),
        ("tests/test_packets.py", "tests/test_packet_fuzz.py", "tests/test_burst.py"),
    ),
    "quant": Group(
        (
            "nnburst/cpu/ops/fixed_point.py",
            "nnburst/cpu/ops/requantization.py",
            "nnburst/cpu/ops/fused_activation.py",
        ),
        (
            "tests/test_quant_exact.py",
            "tests/test_quant_helpers.py",
            "tests/test_cpu_ops_conv_recurrent.py",
            "tests/test_cpu_ops_elementwise_shape.py",
        ),
        focus=r"\.x_(quantize_multiplier|fixed_mul|rounding_divide_by_pot"
        r"|multiply_by_quantized_multiplier|requantize|fused_activation_bounds|round_half_away|trunc_div"
        r"|dequantize|quantized_range)__mutmut",
    ),
    "fusion": Group(("nnburst/cpu/fusion.py",), ("tests/test_fusion.py",)),
    # Prepare-time binding: each op module's ``_bind*`` (the fast path an operation
    # takes when its parameters are constants), compared with the unbound execute.
    "binding": Group(
        ("nnburst/cpu/ops/*.py",),
        ("tests/test_kernel_binding.py",),
        focus=r"\.x__bind",
        names=("nnburst.cpu.ops.*.x__bind*",),
    ),
    "qlstm": Group(
        ("nnburst/cpu/ops/quantized_lstm.py",),
        (
            "tests/test_cpu_ops_quantized_lstm.py",
            "tests/test_tflite_recurrent.py",
            "tests/test_quantized_lstm_exact.py",
        ),
    ),
    # The importers' mappers (module-level functions: each operator's mapping and
    # its helpers), not the Converter machinery, the flatbuffer reader or the
    # refusal messages.  A glob of each package: the per-family modules of a
    # split are picked up as they come.
    "tflite-import": Group(
        ("nnburst/tflite/*.py", "nnburst/tflite/ops/*.py"),
        (
            "tests/test_tflite.py",
            "tests/test_tflite_recurrent.py",
            "tests/test_tflite_mappers.py",
            "-k",
            "not nnburst_bench and not nnburst_run and not service_device",
        ),
        focus=MAPPERS_ONLY,
        names=("nnburst.tflite.*.x_*",),
        exclude=(
            "nnburst/tflite/reader.py",
            "nnburst/tflite/__init__.py",
            "nnburst/tflite/interpreter.py",
            "nnburst/tflite/loading.py",
        ),
        skip_lines=IMPORTER_MESSAGES,
    ),
    "onnx-import": Group(
        ("nnburst/onnx/*.py", "nnburst/onnx/ops/*.py"),
        (
            "tests/test_onnx.py",
            "tests/test_onnx_mappers.py",
            "tests/test_onnx_mappers_more.py",
            "tests/test_onnx_quantized.py",
            "tests/test_onnx_resize_pool.py",
            "tests/test_onnx_attention.py",
            "tests/test_onnx_quantized_inputs.py",
            "tests/test_onnx_mappers_known.py",
            "tests/test_onnx_attention_windows.py",
            "tests/test_onnx_mappers_survivors.py",
            "-k",
            "not node_tests and not real_models and not nnburst_run and not nnburst_bench",
        ),
        focus=MAPPERS_ONLY,
        names=("nnburst.onnx.*.x_*",),
        exclude=(
            "nnburst/onnx/backend.py",
            "nnburst/onnx/__init__.py",
            "nnburst/onnx/session.py",
            "nnburst/onnx/loading.py",
            "nnburst/onnx/patch.py",
        ),
        skip_lines=IMPORTER_MESSAGES,
    ),
    # The graph optimiser's rewrites, each compared with the graph as written.
    "optimise": Group(
        ("nnburst/cpu/optimise.py",),
        (
            "tests/test_graph_optimiser.py",
            "tests/test_graph_optimiser_guards.py",
            "tests/test_graph_optimiser_more.py",
            "tests/test_graph_optimiser_leaky.py",
            "tests/test_pad_fold.py",
            "tests/test_pad_fold_refusals.py",
            "tests/test_optimise_square.py",
            "tests/test_graph_optimiser_survivors.py",
        ),
    ),
    # The C plan's planner (which runs become one C call, their steps and arena),
    # each planned run compared with the operations one by one.
    "plan": Group(
        ("nnburst/cpu/plan.py",),
        (
            "tests/test_cpu_plan.py",
            "tests/test_cpu_plan_broadcast.py",
            "tests/test_cpu_plan_fconv.py",
            "tests/test_cpu_plan_inputs.py",
            "tests/test_cpu_plan_layers.py",
            "tests/test_cpu_plan_more.py",
            "tests/test_cpu_plan_arena.py",
            "tests/test_cpu_plan_depth_to_space.py",
            "tests/test_cpu_plan_moves.py",
            "tests/test_cpu_plan_pools.py",
            "tests/test_cpu_plan_qconv_int16.py",
            "tests/test_cpu_plan_reductions.py",
            "tests/test_cpu_plan_resize.py",
            "tests/test_cpu_plan_survivors.py",
            "tests/test_cpu_plan_transpose_conv.py",
        ),
    ),
    "spin": Group(("nnburst/hal/spin.py",), ("tests/test_spin.py",)),
    "workers": Group(("nnburst/service/workers.py",), ("tests/test_service_worker_pool.py",)),
}


#: Groups left out of the default run: hal-full takes hours; the importers' groups
#: (tflite-import 92 %, onnx-import's 6,101 mutants 1.5-2 hours at 50-65 a minute:
#: see LAST_RUN.md) take long on a busy machine.
NOT_DEFAULT = ("hal-full", "tflite-import", "onnx-import")


@dataclass(frozen=True)
class CMutant:
    name: str
    path: str
    old: str
    new: str


#: Each replaces one exact snippet (it must occur once).  Tests: C_TESTS.
C_MUTANTS = [
    CMutant(
        "c.no_lapped_check_in_read",
        "csrc/fmq.c",
        "        rc = lapped_during_copy(q, pos);\n        if (rc) return rc;\n    }\n    /* S2",
        "        (void)lapped_during_copy;\n    }\n    /* S2",
    ),
    CMutant(
        "c.lapped_check_off_by_one",
        "csrc/fmq.c",
        "if (claimed - r > q->ring_bytes) return overflowed",
        "if (claimed - r > q->ring_bytes + q->quantum) return overflowed",
    ),
    CMutant(
        "c.lapped_check_too_eager",
        "csrc/fmq.c",
        "if (claimed - r > q->ring_bytes) return overflowed",
        "if (claimed - r >= q->ring_bytes) return overflowed",
    ),
    CMutant(
        "c.no_write_claim",
        "csrc/fmq.c",
        "        STORE_RELAXED(q->write_begin, w + n * q->quantum);\n",
        "",
    ),
    CMutant(
        "c.overrun_keeps_everything",
        "csrc/fmq.c",
        "uint64_t keep = (q->count / 2) * q->quantum;",
        "uint64_t keep = q->count * q->quantum;",
    ),
    CMutant(
        "c.no_counter_order_check",
        "csrc/fmq.c",
        "    if (out->write < out->read) return -EPROTO;\n",
        "",
    ),
    CMutant(
        "c.no_capacity_check",
        "csrc/fmq.c",
        "    if (q->flavor == NNB_FLAVOR_SYNCHRONIZED && out->write - out->read > q->ring_bytes)\n"
        "        return -EPROTO;\n",
        "",
    ),
    CMutant(
        "c.no_alignment_check",
        "csrc/fmq.c",
        "if (out->write % q->quantum != 0 || out->read % q->quantum != 0) return -EPROTO;",
        "(void)0;",
    ),
    CMutant(
        "c.full_ring_refused",
        "csrc/fmq.c",
        "if (q->ring_bytes - (c.write - c.read) < need) return -EAGAIN;",
        "if (q->ring_bytes - (c.write - c.read) <= need) return -EAGAIN;",
    ),
    CMutant(
        "c.commit_more_than_granted",
        "csrc/fmq.c",
        "    if (n > q->granted_write) return -EINVAL;",
        "    if (n > q->granted_write + 1) return -EINVAL;",
    ),
    CMutant(
        "c.read_larger_than_ring",
        "csrc/fmq.c",
        "    if (n > q->count) return -EINVAL;\n    if (c.write - c.read < n * q->quantum) return -EAGAIN;",
        "    if (c.write - c.read < n * q->quantum) return -EAGAIN;",
    ),
    CMutant(
        "c.wrap_split_inclusive",
        "csrc/fmq.c",
        "r[0].count = n < contiguous ? n : contiguous;",
        "r[0].count = n <= contiguous ? n : contiguous;",
    ),
    CMutant(
        "c.fast_path_strict",
        "csrc/fmq.c",
        "w - r <= q->ring_bytes && w - r >= n * q->quantum) {",
        "w - r <= q->ring_bytes && w - r > n * q->quantum) {",
    ),
    CMutant(
        "c.attach_ignores_count",
        "csrc/fmq.c",
        "        h->count != count || h->ring_bytes",
        "        h->ring_bytes",
    ),
]
C_TESTS = [
    "tests/test_fmq.py",
    "tests/test_fmq_unsync.py",
    "tests/test_fmq_corruption.py",
    "tests/test_fmq_model.py",
    "tests/test_event_flag.py",
    "tests/test_fmq_ipc.py",
]


def equivalent() -> dict[str, str]:
    """name -> reason, from equivalent.txt (``name  reason``; # comments)."""
    found = {}
    for line in EQUIVALENT.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, reason = line.partition(" ")
            found[name] = reason.strip()
    return found


def work_tree(base: Path, name: str) -> Path:
    tree = base / name
    tree.mkdir()
    for item in COPY:
        source = ROOT / item
        if source.is_dir():
            shutil.copytree(source, tree / item, ignore=IGNORE)
        else:
            shutil.copy2(source, tree / item)
    return tree


def build_native(tree: Path) -> Path:
    """Compile nnburst._native in ``tree``; returns the module's path."""
    done = subprocess.run(
        [sys.executable, "csrc/build_ffi.py"], cwd=tree, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (module,) = (tree / "nnburst").glob("_native*.so")
    return module


CONFIG_HEADER = "\n[tool.mutmut]\n"


def mutmut_config(group: Group, module: Path, tree: Path) -> str:
    def toml_list(items) -> str:
        return "[" + ", ".join(f"'{i}'" for i in items) + "]"  # TOML literal strings

    return (
        CONFIG_HEADER + 'source_paths = ["nnburst/"]\n'
        f"only_mutate = {toml_list(group.mutate)}\n"
        f"do_not_mutate = {toml_list(group.exclude)}\n"
        f"do_not_mutate_patterns = {toml_list(group.skip_lines)}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(group.tests)}\n"
        f"pytest_add_cli_args = {toml_list(PYTEST_ARGS)}\n"
        f"also_copy = {toml_list([str(module.relative_to(tree)), 'csrc/'])}\n"
        # A mutant that turns a bounded wait into "forever" only ends at this
        # limit: (test time + constant) x multiplier, 5 s x 3 rather than 1 s x 15.
        "timeout_multiplier = 3.0\n"
        "timeout_constant = 5.0\n"
    )


def sweep_segments(tree: Path) -> None:
    """Remove the shared-memory segments that killed mutants left (their creators are gone)."""
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from nnburst.shm import sweep_stale_segments; sweep_stale_segments()",
        ],
        cwd=tree,
        check=False,
    )


STATUS = re.compile(r"^\s*(\S+): (.+)$")


def run_group(
    name: str, group: Group, base: Path, jobs: int, only: tuple[str, ...] = ()
) -> dict[str, str]:
    """mutant name -> mutmut status for one group.  A work tree left by an
    earlier run in ``base`` is reused: mutmut resumes where it stopped, and the
    survivors of that run are tested again against the checkout's current tests.
    ``only`` (mutmut name patterns) restricts the run and the score to those
    mutants, e.g. the functions a new test file targets in a slow group."""
    tree = base / name
    resumed = (tree / "pyproject.toml").exists()
    if not resumed:
        shutil.rmtree(tree, ignore_errors=True)
        tree = work_tree(base, name)
        module = build_native(tree)
        with open(tree / "pyproject.toml", "a") as f:
            f.write(mutmut_config(group, module, tree))
    else:  # mutmut runs the tests from its own copy (mutants/tests) too
        for copy in (tree / "tests", tree / "mutants" / "tests"):
            if copy.is_dir():
                shutil.copytree(ROOT / "tests", copy, ignore=IGNORE, dirs_exist_ok=True)
        # The group's tests may have changed since (a new test file for the survivors).
        (module,) = (tree / "nnburst").glob("_native*.so")
        config = tree / "pyproject.toml"
        kept = config.read_text().split(CONFIG_HEADER)[0]
        config.write_text(kept + mutmut_config(group, module, tree))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env.update(SHM_TAG)
    mutmut = [sys.executable, "-m", "mutmut"]
    log = base / f"{name}.log"

    def run(*names: str) -> None:
        names = names or only or group.names
        with open(log, "a") as out:
            subprocess.run(
                [*mutmut, "run", "--max-children", str(jobs), *names],
                cwd=tree,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        sweep_segments(tree)

    def results() -> dict[str, str]:
        listing = subprocess.run(
            [*mutmut, "results", "--all", "true"],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return {
            m.group(1): m.group(2).strip() for m in map(STATUS.match, listing.splitlines()) if m
        }

    survivors = []
    patterns = only or group.names
    if resumed:
        survivors = [n for n, s in results().items() if s not in (*KILLED, "not checked")]
        if only:
            survivors = [n for n in survivors if any(fnmatch.fnmatchcase(n, p) for p in only)]
    if resumed and patterns:
        # mutmut re-runs every mutant it is named (patterns too), decided or not: name
        # only those still undecided, or a resumed onnx-import starts over
        pending = [
            n
            for n, s in results().items()
            if s == "not checked" and any(fnmatch.fnmatchcase(n, p) for p in patterns)
        ]
        if pending:
            run(*pending)
    else:
        run()
    if survivors:
        run(*survivors)
    statuses = results()
    if not statuses:
        raise RuntimeError(
            f"mutmut produced no results for {name}; see {log}:\n{log.read_text()[-3000:]}"
        )
    if all(s == "not checked" for s in statuses.values()):
        raise RuntimeError(
            f"mutmut checked no mutant of {name} (did the clean run fail?); see {log}"
        )
    if only:
        statuses = {
            n: s for n, s in statuses.items() if any(fnmatch.fnmatchcase(n, p) for p in only)
        }
        print(f"{name}: only the {len(statuses)} mutants named by --names scored", flush=True)
    if group.focus:
        scored = {n: s for n, s in statuses.items() if re.search(group.focus, n)}
        print(
            f"{name}: {len(statuses) - len(scored)} mutants outside the focus not scored",
            flush=True,
        )
        statuses = scored
    return statuses


def run_c(base: Path) -> dict[str, str]:
    """C mutant name -> "killed" / "survived"."""
    shutil.rmtree(base / "c", ignore_errors=True)
    tree = work_tree(base, "c")
    results = {}
    env = dict(os.environ, PYTHONPATH=str(tree), **SHM_TAG)
    build_native(tree)  # the unmutated tree must build and pass, or nothing below means anything
    clean = subprocess.run(
        [sys.executable, "-m", "pytest", *PYTEST_ARGS, *C_TESTS],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if clean.returncode:
        raise RuntimeError(f"the FMQ tests fail without any mutant:\n{clean.stdout[-3000:]}")
    for mutant in C_MUTANTS:
        path = tree / mutant.path
        original = path.read_text()
        if original.count(mutant.old) != 1:
            raise RuntimeError(
                f"{mutant.name}: the snippet is not in {mutant.path} exactly once; update C_MUTANTS"
            )
        path.write_text(original.replace(mutant.old, mutant.new))
        try:
            for stale in (tree / "nnburst").glob("_native*.so"):
                stale.unlink()
            try:
                build_native(tree)
            except RuntimeError:
                results[mutant.name] = "killed (does not compile)"
                continue
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "pytest", "-x", *PYTEST_ARGS, *C_TESTS],
                    cwd=tree,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                results[mutant.name] = "survived" if done.returncode == 0 else "killed"
            except subprocess.TimeoutExpired:
                results[mutant.name] = "killed (timeout)"
        finally:
            path.write_text(original)
    sweep_segments(tree)
    return results


KILLED = ("killed", "timeout", "segfault", "killed (does not compile)", "killed (timeout)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        default=",".join([*(g for g in GROUPS if g not in NOT_DEFAULT), "c"]),
        help=f"comma-separated groups: {', '.join(GROUPS)}, c (default: all but "
        f"{', '.join(NOT_DEFAULT)})",
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 2, help="parallel mutmut children"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary work trees")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="work trees go here and are kept; a later run with the same directory resumes",
    )
    parser.add_argument(
        "--names",
        default="",
        help="comma-separated mutmut name patterns (fnmatch, e.g. "
        "'nnburst.onnx.ops.pooling.x__pool_by_taps*'): run and score only these mutants "
        "of the chosen groups (a slow group's functions that new tests target)",
    )
    args = parser.parse_args()
    only = tuple(p.strip() for p in args.names.split(",") if p.strip())
    chosen = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = set(chosen) - {*GROUPS, "c"}
    if unknown:
        parser.error(f"unknown groups: {', '.join(sorted(unknown))}")
    skip = equivalent()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        base, args.keep = args.workdir.resolve(), True
    else:
        base = Path(tempfile.mkdtemp(prefix="nnburst-mutants-"))
    results: dict[str, str] = {}
    try:
        for name in chosen:
            started = time.monotonic()
            found = (
                run_c(base) if name == "c" else run_group(name, GROUPS[name], base, args.jobs, only)
            )
            results.update(found)
            killed = sum(1 for s in found.values() if s in KILLED)
            print(
                f"{name}: {killed} of {len(found)} killed in {time.monotonic() - started:.0f} s",
                flush=True,
            )
    finally:
        if args.keep:
            print(f"work trees kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    counted = {n: s for n, s in results.items() if n not in skip}
    survivors = sorted((n, s) for n, s in counted.items() if s not in KILLED)
    for name, status in survivors:
        print(f"survived: {name} ({status})")
    for name in sorted(set(results) & set(skip)):
        print(f"equivalent: {name}: {skip[name]}")
    killed = len(counted) - len(survivors)
    total = len(counted)
    print(f"killed {killed} of {total} mutants ({100 * killed / total if total else 0:.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
