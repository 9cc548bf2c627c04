"""Latency summaries: percentiles from per-operation samples, and a text table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class LatencyStats:
    """Percentiles in microseconds, and operations per second from the mean."""

    name: str
    count: int
    p50_us: float
    p90_us: float
    p99_us: float
    p999_us: float
    mean_us: float
    per_second: float

    @classmethod
    def from_ns(cls, name: str, samples_ns: Sequence[int] | np.ndarray) -> LatencyStats:
        samples = np.asarray(samples_ns, dtype=np.float64) / 1000.0
        if samples.size == 0:
            raise ValueError(f"{name}: no samples")
        p50, p90, p99, p999 = np.percentile(samples, [50, 90, 99, 99.9])
        mean = float(samples.mean())
        return cls(
            name,
            int(samples.size),
            float(p50),
            float(p90),
            float(p99),
            float(p999),
            mean,
            1e6 / mean,
        )

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


@dataclass(frozen=True)
class Throughput:
    name: str
    items: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.items / self.seconds

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            "name": self.name,
            "items": self.items,
            "seconds": self.seconds,
            "per_second": self.per_second,
        }


#: The widest line a bench table or its reading prints: a 100-column terminal shows it whole.
WIDTH = 100

#: The columns of every latency table, after the mode: the same words in each benchmark.
#: A run is one timed call (an execution, or a queue round trip in ``bench fmq``).
LATENCY_TITLES = ("runs", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "runs/s")


def latency_cells(row: LatencyStats) -> list[str]:
    """A row's cells under :data:`LATENCY_TITLES`."""
    return [
        str(row.count),
        *(_us(v) for v in (row.p50_us, row.p90_us, row.p99_us, row.p999_us)),
        f"{row.per_second:.0f}",
    ]


def _us(value: float) -> str:
    # Three significant digits where they matter: a queue round trip is a few µs.
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def ratio_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def aligned(titles: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A table: the first column left-aligned, the others right-aligned, each as wide
    as its widest cell, under a rule.  A row shorter than the titles (a mode that
    failed: its name and why) is written as it is after the first column, cut to
    :data:`WIDTH`."""
    full = [r for r in rows if len(r) == len(titles)]
    widths = [max(len(t), *(len(r[i]) for r in full)) for i, t in enumerate(titles)]
    widths[0] = max(widths[0], *(len(r[0]) for r in rows)) if rows else widths[0]

    def line(cells: Sequence[str]) -> str:
        if len(cells) < len(titles):
            text = "  ".join([f"{cells[0]:<{widths[0]}}", *cells[1:]])
            return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."
        parts = [f"{cells[0]:<{widths[0]}}"]
        parts += [f"{c:>{w}}" for c, w in zip(cells[1:], widths[1:])]
        return "  ".join(parts)

    top = line(titles)
    return [top, "-" * len(top), *(line(r) for r in rows)]


def compared(time: float, other: float, name: str) -> str:
    """How ``time`` compares with ``other`` (``name``'s), in the words every bench
    sentence uses: "2.0x faster than NAME", "1.3x slower than NAME", or "as fast as
    NAME" when the factor rounds to 1.0."""
    if time <= other:
        factor = f"{other / time:.1f}"
        return f"as fast as {name}" if factor == "1.0" else f"{factor}x faster than {name}"
    factor = f"{time / other:.1f}"
    return f"as fast as {name}" if factor == "1.0" else f"{factor}x slower than {name}"


def latency_table(
    rows: Sequence[LatencyStats], baseline: str | None = None, ratio_title: str | None = None
) -> str:
    """A fixed-width table; ``baseline`` names the row the last column compares to,
    headed ``ratio_title`` (default "x BASELINE").

    The ratio is the same in every nnburst table: a row's p50 over the
    baseline's, so below 1 means faster than the baseline."""
    base = next((r for r in rows if r.name == baseline), None)
    titles = ["mode", *LATENCY_TITLES]
    if base:
        titles.append(ratio_title or f"x {base.name}")
    cells = []
    for r in rows:
        row = [r.name, *latency_cells(r)]
        if base:
            row.append(ratio_cell(r.p50_us / base.p50_us))
        cells.append(row)
    return "\n".join(aligned(titles, cells))


def throughput_table(rows: Sequence[Throughput]) -> str:
    width = max(len(r.name) for r in rows)
    lines = [f"{'stream':<{width}}  {'items':>10} {'seconds':>8} {'items/s':>12}"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r.name:<{width}}  {r.items:10d} {r.seconds:8.3f} {r.per_second:12.0f}")
    return "\n".join(lines)
