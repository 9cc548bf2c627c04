"""Latency distributions of a run as a PNG (``nnburst bench --plot FILE.png``).

One panel per model (a model file: one panel), one curve per mode: the share of executions finished
within a given time (a CDF on a log time axis).  Percentile tables hide the
shape; a CDF shows the tail, bimodal wake-ups and the baseline side by side.
Uses matplotlib's object API with the Agg canvas: no display, no global state.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .runtime_bench import Result

if TYPE_CHECKING:
    from .model_bench import Result as ModelResult


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


#: One panel: its title and its curves (the row's name, its latencies in ns, whether it
#: is the baseline the others are compared to).
Panel = tuple[str, Sequence[tuple[str, np.ndarray, bool]]]


def png(result: Result) -> bytes:
    """The runtime run's plot as PNG bytes (for a file, or embedded in the HTML report):
    one panel per model, the Pipe baseline in black."""
    panels = []
    for model in result.settings.models:
        rows = [r for r in result.rows if r.mode.model == model]
        if rows:
            curves = [(r.mode.name, r.samples_ns, r.mode.path == "pipe") for r in rows]
            panels.append((rows[0].workload, curves))
    return cdf_png(panels)


def model_png(result: ModelResult) -> bytes:
    """A ``bench --model FILE`` run's plot: one panel, the file's own runtime in black."""
    curves = [(r.name, result.samples_ns[r.name], r.name == result.peer) for r in result.rows]
    return cdf_png([(Path(result.path).name, curves)] if curves else [])


def cdf_png(panels: Sequence[Panel]) -> bytes:
    """The panels, one above the other, as PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 3.6 * max(1, len(panels))), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(max(1, len(panels)), 1, squeeze=False)[:, 0]
    for ax, (title, curves) in zip(axes, panels):
        for name, samples_ns, baseline in curves:
            samples = np.sort(samples_ns) / 1000.0
            share = np.arange(1, samples.size + 1) / samples.size
            style = {"color": "black", "linewidth": 2.2} if baseline else {"linewidth": 1.2}
            ax.step(samples, share, where="post", label=name, **style)
        ax.set_xscale("log")
        ax.set_xlabel("latency per execution (µs, log scale)")
        ax.set_ylabel("share of executions")
        ax.set_ylim(0, 1.01)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    if not panels:
        axes[0].text(0.5, 0.5, "no finished modes", ha="center", va="center")
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=110)
    return out.getvalue()
