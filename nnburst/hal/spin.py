"""When a burst waits for its peer: spin first only while spinning pays.

Spinning (polling in C without the GIL before sleeping on the futex) saves
the futex wake-up, tens of microseconds on a VM, when the answer comes
within the window.  When it does not (a slow model, an app that pauses
between executions, or a machine whose cores are all busy) the window is
pure loss: the waiter burns its CPU, then sleeps anyway, and on a loaded
machine the burned CPU is taken from the very peer it waits for.

The policy sees only how long each wait took, and judges spinning two ways:

* A wait longer than the window is a miss: the spin did not catch the answer.
* A wait that spun is also a miss while spinning waits take longer, on
  average, than sleeping ones.  On a busy machine a spin can "catch" every
  answer and still lose: the peer was preempted by the load, and sleeping
  would have let the scheduler run it sooner.  So the policy keeps a running
  average of both kinds of wait, and takes one sleeping wait every
  ``SLEEP_SAMPLE_EVERY`` waits to keep the sleeping average current.

After ``MISSES`` misses in a row the window closes (the waiter sleeps at
once); it reopens for one probe wait after a pause of ``FIRST_PAUSE`` waits,
doubled after every failed probe up to ``LONGEST_PAUSE``, and a probe that
pays reopens it (its wait replaces the spinning average, stale by then).  A probe spins ``PROBE_FACTOR`` times the window: the peer
may have closed its own window and be asleep, and a probe that only ever met
a sleeping peer would keep both ends closed for good.  C owns the spinning;
this module only chooses the window for the next wait.

A loop in C that waits many times (a burst server answering repeats,
``csrc/burst_fast.c``) asks :meth:`SpinPolicy.window_run` for a window and
how many waits it holds for, and reports them all with
:meth:`SpinPolicy.record_run`: the hits as well as the misses.  A policy told
only of misses closes after three of them, however rare, and one never told
of the waits that follow never reaches its probe: the server then sleeps on
every request for the rest of the burst.
"""

from __future__ import annotations

#: Consecutive misses that close the window.
MISSES = 3
#: Waits without spinning before the first probe, and the cap after doubling.
FIRST_PAUSE = 16
LONGEST_PAUSE = 1024
#: How much longer than the window a probe spins (room for waking a sleeping peer).
PROBE_FACTOR = 4
#: While the window is open, one wait in this many sleeps, to measure sleeping.
SLEEP_SAMPLE_EVERY = 256
#: Each wait moves its running average by 1/AVERAGE_WEIGHT of the difference;
#: a wait counts as at most OUTLIER_FACTOR times the average (a preemption of
#: several milliseconds says little about the next wait).
AVERAGE_WEIGHT = 8
OUTLIER_FACTOR = 4
#: Waits a burst's two ends do not judge: the first requests of a burst pay
#: for first-time work (the server maps the pools and arms its C path, the
#: client stages and arms its own), and three such waits would close the
#: window for the rest of the burst.
WARM_UP = 16
#: Equal samples after which the average is theirs (within 1.4%: (7/8)**32).
STEADY_AFTER = 32


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
        "spun_ns",
        "slept_ns",
        "waits",
        "_warm_up",
    )

    def __init__(self, window_ns: int, warm_up: int = 0) -> None:
        """``warm_up``: how many first waits to leave unjudged (a burst's ends
        pass :data:`WARM_UP`)."""
        self.window_ns = max(0, int(window_ns))
        self._warm_up = max(0, int(warm_up))
        self._misses = 0
        self._pause = FIRST_PAUSE
        self._closed_for = 0  # waits left before the next probe
        self._probe_next = False
        self._until_sample = SLEEP_SAMPLE_EVERY
        #: Running averages of the waits that spun and of those that slept (0: none yet).
        self.spun_ns = 0
        self.slept_ns = 0
        #: Waits given a window so far (statistics, tests).
        self.waits = 0

    def next_window(self) -> int:
        """The spin window, in ns, for the coming wait."""
        window, _ = self.window_run()
        self._advance(1)
        return window

    def window_run(self) -> tuple[int, int]:
        """The spin window for the coming waits and how many waits in a row it
        holds for, unless one misses (0: no limit, for a policy that never
        spins: it has nothing to learn): a loop in C that waits many times
        asks once, then reports them all with :meth:`record_run`."""
        if self.window_ns == 0:
            return 0, 0
        if self._closed_for:
            return 0, self._closed_for
        if self._probe_next:
            return PROBE_FACTOR * self.window_ns, 1
        if self._until_sample <= 1:
            return 0, 1  # the sleeping sample
        return self.window_ns, self._until_sample - 1

    def _advance(self, waits: int) -> None:
        """Count ``waits`` waits with the window :meth:`window_run` gave."""
        self.waits += waits
        if self._closed_for:
            self._closed_for = max(0, self._closed_for - waits)
            return
        if self._probe_next:
            self._probe_next = False
            self.spun_ns = 0  # stale after the pause: the probe's wait replaces it
            return
        self._until_sample -= waits
        if self._until_sample <= 0:
            self._until_sample = SLEEP_SAMPLE_EVERY

    def record_run(self, window_ns: int, waits: int, waited_ns: int, missed_ns: int = 0) -> None:
        """Account ``waits`` waits with ``window_ns`` (from :meth:`window_run`),
        ``waited_ns`` in all, the last of which missed the window when
        ``missed_ns`` (its length) is not 0.  The waits that did not miss count
        as that many waits of their average length: hits and misses both reach
        the policy, and move its averages, as they do one by one through
        :meth:`record`."""
        if waits <= 0:
            return
        self._advance(waits)
        hits = waits - (1 if missed_ns else 0)
        if hits > 0:
            self.record(window_ns, (waited_ns - missed_ns) // hits, hits)
        if missed_ns:
            self.record(window_ns, missed_ns)

    def record(self, spin_ns: int, waited_ns: int, times: int = 1) -> None:
        """Account a wait that spun for up to ``spin_ns`` and took ``waited_ns`` in
        all (``times`` such waits, judged as one: a run of hits is one hit)."""
        if self.window_ns == 0:
            return  # never spins: nothing to learn
        if self._warm_up:
            self._warm_up = max(0, self._warm_up - times)
            return
        if spin_ns == 0:
            self.slept_ns = _averaged(self.slept_ns, waited_ns, times)
            return
        self.spun_ns = _averaged(self.spun_ns, waited_ns, times)
        if waited_ns <= spin_ns and not self.spun_ns > self.slept_ns > 0:
            self._misses = 0
            self._pause = FIRST_PAUSE
            return
        self._misses += 1
        if self._misses >= MISSES:
            self._closed_for = self._pause
            self._probe_next = True
            self._pause = min(2 * self._pause, LONGEST_PAUSE)
            self._misses = MISSES - 1  # one more miss (a failed probe) closes it again

    @property
    def spinning(self) -> bool:
        """True while the window is open."""
        return self.window_ns > 0 and self._closed_for == 0


def _averaged(average: int, sample: int, times: int = 1) -> int:
    """The running ``average`` moved toward ``sample`` as ``times`` such samples
    one after another would move it (each clipped: see OUTLIER_FACTOR).

    A run of waits reported at once must weigh as much as the same waits
    reported one by one: counted as one sample, 64 sleeping waits of 110 us
    would leave a sleeping average of 5 us, learnt while the peer spun, nearly
    where it was, and a probe that met the now sleeping peer would be judged
    slower than sleeping forever (both ends of a burst then stay closed)."""
    if average == 0:
        average, times = sample, times - 1
    for _ in range(min(times, STEADY_AFTER)):
        step = min(sample, OUTLIER_FACTOR * average)
        average += (step - average) // AVERAGE_WEIGHT
    return average
