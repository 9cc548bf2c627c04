"""What InferenceSession.run and the Interpreter's invoke cycle add over the
Runner they wrap, on ADD+MUL (3x4): the rows ``nnburst bench`` prints under
its ADD+MUL table, alone (see nnburst/tools/benchmarks/facades.py for the method).

    python bench/facade_overhead.py [SECONDS]
"""

import sys

from nnburst.tools.benchmarks import facades, runtime_paths


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    rows = facades.measure(runtime_paths.add_mul_model(), seconds)
    print("\n".join(facades.lines(rows)[1:]))


if __name__ == "__main__":
    main()
