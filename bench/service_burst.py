"""The ADD+MUL burst to a driver service against the same compute in-process,
for one or more checkouts, in alternating runs (the issue's goal: service
burst <= 2x the in-process compute).

    python bench/service_burst.py TREE [TREE ...] [--rounds 3] [--duration 0.7] [--pin]

Each round runs ``nnburst bench runtime --model add-mul --paths sync,burst``
once per tree (its own process, ``PYTHONPATH=TREE``: build each tree's C
module first), trees in turn, so a drifting machine slows them alike.  Prints
every round's p50s and, per tree, the median over rounds of each burst row's
ratio to ``sync in-process`` from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

IN_PROCESS = "sync in-process"
BURSTS = (
    "burst cross-process poll 0us",
    "burst cross-process poll 50us",
    "burst cross-process poll 200us",
)


def one_run(tree: str, duration: float, pin: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        out = os.path.join(directory, "run.json")
        command = [sys.executable, "-m", "nnburst", "bench", "runtime", "--model", "add-mul"]
        command += ["--paths", "sync,burst", "--duration", str(duration), "--json", out]
        command += ["--pin"] if pin else ["--no-pin"]
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, cwd=directory)
        with open(out) as f:
            rows = json.load(f)["latency"]
    return {row["name"]: row["p50_us"] for row in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=0.7)
    parser.add_argument("--pin", action="store_true", help="pin client and service to CPUs")
    args = parser.parse_args()
    ratios: dict[str, dict[str, list[float]]] = {t: {b: [] for b in BURSTS} for t in args.trees}
    for round_ in range(1, args.rounds + 1):
        for tree in args.trees:
            p50 = one_run(tree, args.duration, args.pin)
            base = p50[IN_PROCESS]
            cells = "  ".join(f"{b.split()[-1]:>5} {p50[b]:6.1f}" for b in BURSTS)
            print(f"round {round_} {tree:24s} in-process {base:5.2f} us  bursts: {cells}")
            for b in BURSTS:
                ratios[tree][b].append(p50[b] / base)
    print("\nmedian over rounds of (service burst p50 / in-process sync p50):")
    for tree in args.trees:
        cells = "  ".join(
            f"{b.split()[-1]:>5} {statistics.median(ratios[tree][b]):5.2f}x" for b in BURSTS
        )
        print(f"  {tree:24s} {cells}")


if __name__ == "__main__":
    main()
