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


def latency_table(rows: Sequence[LatencyStats], baseline: str | None = None) -> str:
    """A fixed-width table; ``baseline`` names the row the last column compares to.

    The ratio is the same in every nnburst table: a row's p50 over the
    baseline's, so below 1 means faster than the baseline."""
    base = next((r for r in rows if r.name == baseline), None)
    width = max(len(r.name) for r in rows)
    header = f"{'mode':<{width}}  {'p50 µs':>8} {'p90 µs':>8} {'p99 µs':>8} {'p99.9 µs':>9} {'msg/s':>10}"
    if base:
        header += f"  {'x ' + base.name:>12}"
    lines = [header, "-" * len(header)]
    for r in rows:
        line = (
            f"{r.name:<{width}}  {r.p50_us:8.2f} {r.p90_us:8.2f} {r.p99_us:8.2f} {r.p999_us:9.2f} "
            f"{r.per_second:10.0f}"
        )
        if base:
            line += f"  {r.p50_us / base.p50_us:12.2f}"
        lines.append(line)
    return "\n".join(lines)


def throughput_table(rows: Sequence[Throughput]) -> str:
    width = max(len(r.name) for r in rows)
    lines = [f"{'stream':<{width}}  {'items':>10} {'seconds':>8} {'items/s':>12}"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r.name:<{width}}  {r.items:10d} {r.seconds:8.3f} {r.per_second:12.0f}")
    return "\n".join(lines)
