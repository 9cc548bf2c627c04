"""Latency distributions of a run as a PNG (``nnburst bench --plot FILE.png``).

One panel per model, one curve per mode: the share of executions finished
within a given time (a CDF on a log time axis).  Percentile tables hide the
shape; a CDF shows the tail, bimodal wake-ups and the baseline side by side.
Uses matplotlib's object API with the Agg canvas: no display, no global state.
"""

from __future__ import annotations

import io

import numpy as np

from .runtime_bench import Result


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def png(result: Result) -> bytes:
    """The plot as PNG bytes (for a file, or embedded in the HTML report)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    models = [m for m in result.settings.models if any(r.mode.model == m for r in result.rows)]
    figure = Figure(figsize=(7.5, 3.6 * max(1, len(models))), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(max(1, len(models)), 1, squeeze=False)[:, 0]
    for ax, model in zip(axes, models):
        rows = [r for r in result.rows if r.mode.model == model]
        for row in rows:
            samples = np.sort(row.samples_ns) / 1000.0
            share = np.arange(1, samples.size + 1) / samples.size
            style = (
                {"color": "black", "linewidth": 2.2}
                if row.mode.path == "pipe"
                else {"linewidth": 1.2}
            )
            ax.step(samples, share, where="post", label=row.mode.name, **style)
        ax.set_xscale("log")
        ax.set_xlabel("latency per execution (µs, log scale)")
        ax.set_ylabel("share of executions")
        ax.set_ylim(0, 1.01)
        ax.set_title(rows[0].workload)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    if not models:
        axes[0].text(0.5, 0.5, "no finished modes", ha="center", va="center")
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=110)
    return out.getvalue()
