"""A progress bar for benchmark runs: tqdm on a terminal, nothing otherwise.

The bar shows up only once a run has taken a second (tqdm's ``delay``), so
short runs and pipes stay clean; it goes to stderr, away from the table.
"""

from __future__ import annotations

import sys
from typing import Any

try:
    from tqdm import tqdm
except ImportError:  # a dependency, but a run should not fail for want of a bar
    _Bar: Any = None
else:

    class _Bar(tqdm):  # type: ignore[no-redef]
        monitor_interval = 0  # no monitor thread: nothing to leave behind on Ctrl-C


class Progress:
    """Progress over ``total`` steps, advanced by fractions while a step runs."""

    def __init__(self, total: int, enabled: bool | None = None) -> None:
        self._done = 0.0
        self._index = -1
        self._bar: Any = None
        if _Bar is not None and enabled is not False and total > 0:
            self._bar = _Bar(
                total=total,
                disable=None if enabled is None else not enabled,  # None: only on a terminal
                delay=1.0,
                leave=False,
                file=sys.stderr,
                bar_format="{desc:<40.40} {bar} {percentage:3.0f}% [{elapsed}<{remaining}]",
            )

    def step(self, label: str) -> None:
        """A new step starts; the previous one is complete."""
        self._index += 1
        if self._bar is not None:
            self._set(self._index)
            self._bar.set_description_str(label, refresh=False)

    def advance(self, fraction: float) -> None:
        """The current step is ``fraction`` (0..1) done."""
        if self._bar is not None:
            self._set(self._index + min(max(fraction, 0.0), 1.0))

    def _set(self, value: float) -> None:
        delta = value - self._done
        if delta > 0:
            self._bar.update(delta)
            self._done = value

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
