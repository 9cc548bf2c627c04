"""A self-contained report page of a run (``nnburst bench --html FILE``).

In the spirit of the NNAPI benchmark app's result page: what was measured,
the table per model, the latency plot and the machine, in one file with no
outside references (the plot is an embedded base64 PNG), so it can be
attached to a bug or mailed as it is.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 62em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { padding: 0.25em 0.7em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.baseline td { font-weight: bold; background: #f4f4f4; }
.note { color: #555; white-space: pre-wrap; font-size: 0.9em; }
.warn { color: #a40; font-weight: bold; }
img { max-width: 100%; }
"""

#: What a page shows for a value that is not there (JSON null).
NONE = "—"

_COLUMNS = [
    ("name", "mode"),
    ("count", "runs"),
    ("p50_us", "p50 µs"),
    ("p90_us", "p90 µs"),
    ("p99_us", "p99 µs"),
    ("p999_us", "p99.9 µs"),
    ("per_second", "runs/s"),
    ("vs_baseline", "× Pipe (p50)"),
    ("vs_onnxruntime", "× onnxruntime (p50)"),
]


def _cell(key: str, value: Any) -> str:
    if value is None:
        return NONE
    if key == "per_second":
        return f"{value:.0f}"
    if key in ("vs_baseline", "vs_onnxruntime", "vs_peer"):
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:.1f}"
    return escape(str(value))


def shown(value: Any) -> str:
    """A JSON value as a person reads it: no Python reprs (None, True, ['a', 'b'])."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(shown(v) for v in value) if value else NONE
    if isinstance(value, dict):
        return ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) if value else NONE
    return str(value)


def render(document: dict[str, Any], header: str, plot_png: bytes | None) -> str:
    """The page for a ``"runtime"`` or a ``"model"`` document (see :mod:`.report`)."""
    model_file = document["benchmark"] == "model"
    title = (
        f"nnburst bench: {Path(document['parameters']['model']).name} against {document['peer']}"
        if model_file
        else "nnburst bench: NNAPI runtime execution paths"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="note">{escape(header)}</p>',
    ]
    if document.get("interrupted"):
        parts.append('<p class="warn">Interrupted: only the modes that finished are shown.</p>')
    if model_file:
        inputs = "; ".join(
            f"{i['name'] or 'input'} [{shown(i['shape'])}] {i['dtype']}" for i in document["inputs"]
        )
        parts.append(f"<h2>Random inputs: {escape(inputs)}</h2>")
        columns = [*_COLUMNS[:-2], ("vs_peer", f"× {document['peer']} (p50)")]
        parts += _table(document["latency"], columns, lambda row: row["name"] == document["peer"])
        parts += [f'<p class="note">{escape(note)}</p>' for note in document["notes"]]
    for model in [] if model_file else document["parameters"]["models"]:
        mine = [r for r in document["latency"] if r["model"] == model]
        if not mine:
            continue
        first = mine[0]
        parts.append(
            f"<h2>{escape(first['workload'])} "
            f"({first['bytes_in']} bytes in, {first['bytes_out']} bytes out)</h2>"
        )
        parts += _table(mine, _COLUMNS, lambda row: row["path"] == "pipe")
    peers = document.get("peers") or {}
    if peers.get("missing"):
        parts.append(f'<p class="note">{escape(peers["missing"])}</p>')
    parts.append("<h2>Latency distributions</h2>")
    if plot_png is None:
        parts.append(
            '<p class="note">No plot: matplotlib is not installed '
            "(pip install matplotlib, or pip install '.[plot]' from a source checkout).</p>"
        )
    else:
        data = base64.b64encode(plot_png).decode("ascii")
        parts.append(f'<img alt="latency CDF per mode" src="data:image/png;base64,{data}">')
    parts.append("<h2>Run</h2><table>")
    facts = {
        **document["parameters"],
        "seconds": round(document["seconds"], 2),
        "created": document["created"],
    }
    parts += [f"<tr><td>{escape(k)}</td><td>{escape(shown(v))}</td></tr>" for k, v in facts.items()]
    parts.append("</table><h2>Environment</h2><table>")
    parts += [
        f"<tr><td>{escape(k)}</td><td>{escape(shown(v))}</td></tr>"
        for k, v in document["environment"].items()
    ]
    parts.append("</table></body></html>")
    return "\n".join(parts) + "\n"


def _table(
    rows: list[dict[str, Any]],
    columns: list[tuple[str, str]],
    baseline: Callable[[dict[str, Any]], bool],
) -> list[str]:
    """A latency table, the row others are compared to in bold."""
    parts = ["<table><tr>" + "".join(f"<th>{escape(t)}</th>" for _, t in columns) + "</tr>"]
    for row in rows:
        css = ' class="baseline"' if baseline(row) else ""
        cells = "".join(f"<td>{_cell(k, row.get(k))}</td>" for k, _ in columns)
        parts.append(f"<tr{css}>{cells}</tr>")
    parts.append("</table>")
    return parts
