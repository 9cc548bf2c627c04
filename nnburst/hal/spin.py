"""When a burst waits for its peer: spin first only while spinning pays.

Spinning (polling in C without the GIL before sleeping on the futex) saves
the futex wake-up, tens of microseconds on a VM, when the answer comes
within the window.  When it does not (a slow model, an app that pauses
between executions, or a machine whose cores are all busy) the window is
pure loss: the waiter burns its CPU, then sleeps anyway, and on a loaded
machine the burned CPU is taken from the very peer it waits for.

The policy sees only how long each wait took.  Two signs close the window:

* Misses: a wait longer than the window means the spin did not catch the
  answer.  After ``MISSES`` misses in a row the window closes.
* Spinning slower than sleeping: on a busy machine answers may still come
  within the window, only later than they would if the waiter slept and
  left its core to the peer.  So every ``SAMPLE_EVERY`` waits one wait
  sleeps at once, and the window closes when the average spinning wait is
  no faster than the average sleeping one.

A closed window reopens for one probe wait after a pause of ``FIRST_PAUSE``
waits, doubled after every failed probe up to ``LONGEST_PAUSE``; a probe
that catches its answer faster than sleeping does reopens it.  A probe
spins ``PROBE_FACTOR`` times the window: the peer may have closed its own
window and be asleep, and a probe that only ever met a sleeping peer would
keep both ends closed for good.  C owns the spinning; this module only
chooses the window for the next wait.
"""

from __future__ import annotations

#: Consecutive misses that close the window.
MISSES = 3
#: Waits without spinning before the first probe, and the cap after doubling.
FIRST_PAUSE = 16
LONGEST_PAUSE = 1024
#: How much longer than the window a probe spins (room for waking a sleeping peer).
PROBE_FACTOR = 4
#: While the window is open, one wait in this many sleeps at once, to compare.
SAMPLE_EVERY = 32
#: Sleeping samples needed before spinning is judged against them.
SAMPLES_TO_JUDGE = 2


def _average(mean: float | None, value: int, weight: float) -> float:
    return float(value) if mean is None else mean + weight * (value - mean)


class SpinPolicy:
    """The spin window for each wait, adapted to the waits before it.

    Not thread-safe: one per waiting thread (a burst's client or worker).
    """

    __slots__ = (
        "window_ns",
        "_misses",
        "_pause",
        "_closed_for",
        "_probe_next",
        "_until_sample",
        "_spun_ns",
        "_slept_ns",
        "_samples",
        "_sampling",
    )

    def __init__(self, window_ns: int) -> None:
        self.window_ns = max(0, int(window_ns))
        self._misses = 0
        self._pause = FIRST_PAUSE
        self._closed_for = 0  # waits left before the next probe
        self._probe_next = False
        self._until_sample = SAMPLE_EVERY  # open waits left before a sleeping sample
        self._spun_ns: float | None = None  # average wait that spun (and caught its answer)
        self._slept_ns: float | None = None  # average sampled wait that slept at once
        self._samples = 0
        self._sampling = False  # the coming wait is a sleeping sample

    def next_window(self) -> int:
        """The spin window, in ns, for the coming wait (0 for a sleeping sample)."""
        if self._closed_for:
            self._closed_for -= 1
            return 0
        if self._probe_next:
            self._probe_next = False
            return PROBE_FACTOR * self.window_ns
        if self.window_ns:
            self._until_sample -= 1
            if self._until_sample <= 0:
                self._until_sample = SAMPLE_EVERY
                self._sampling = True
                return 0
        return self.window_ns

    def record(self, spin_ns: int, waited_ns: int) -> None:
        """Account a wait that spun for up to ``spin_ns`` and took ``waited_ns`` in all."""
        if spin_ns == 0:
            if self._sampling:  # not a wait of a closed window
                self._sampling = False
                self._slept_ns = _average(self._slept_ns, waited_ns, 0.25)
                self._samples += 1
                if self._spinning_loses():
                    self._close()
            return
        if waited_ns <= spin_ns:
            probe = spin_ns > self.window_ns
            if probe and self._spinning_loses(waited_ns):
                self._close()  # caught, but no faster than sleeping: stay closed
                return
            self._spun_ns = _average(self._spun_ns, waited_ns, 0.125)
            self._misses = 0
            self._pause = FIRST_PAUSE
            return
        self._misses += 1
        if self._misses >= MISSES:
            self._close()

    def _spinning_loses(self, spun_ns: float | None = None) -> bool:
        """Whether spinning is no faster than sleeping, by the averages (or one wait)."""
        spun = self._spun_ns if spun_ns is None else spun_ns
        if self._samples < SAMPLES_TO_JUDGE or spun is None or self._slept_ns is None:
            return False
        return spun >= self._slept_ns

    def _close(self) -> None:
        self._closed_for = self._pause
        self._probe_next = True
        self._pause = min(2 * self._pause, LONGEST_PAUSE)
        self._misses = MISSES - 1  # one more miss (a failed probe) closes it again

    @property
    def spinning(self) -> bool:
        """True while the window is open."""
        return self.window_ns > 0 and self._closed_for == 0
