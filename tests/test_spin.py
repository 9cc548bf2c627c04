"""The spin policy (nnburst/hal/spin.py) step by step: every number it chooses.

The constants are restated here as literal numbers on purpose: a test that
only compared the policy with its own constants would follow a change of
them (or a wrong formula built from them) instead of catching it.
"""

from __future__ import annotations

import pytest

from nnburst.hal import spin
from nnburst.hal.spin import SpinPolicy

WINDOW = 50_000
HIT, MISS = 1_000, 900_000  # waits well inside and well past the window


def test_the_documented_constants() -> None:
    assert (spin.MISSES, spin.FIRST_PAUSE, spin.LONGEST_PAUSE) == (3, 16, 1024)
    assert (spin.PROBE_FACTOR, spin.SLEEP_SAMPLE_EVERY) == (4, 256)
    assert (spin.AVERAGE_WEIGHT, spin.OUTLIER_FACTOR) == (8, 4)


def closed(policy: SpinPolicy) -> SpinPolicy:
    """Three misses in a row: the window closes."""
    for _ in range(3):
        assert policy.spinning
        policy.record(policy.next_window(), MISS)
    assert not policy.spinning
    return policy


def pause_then_probe(policy: SpinPolicy) -> tuple[int, int]:
    """(waits without spinning before the probe, the probe's window)."""
    pause = 0
    while (window := policy.next_window()) == 0:
        pause += 1
        assert pause <= 5000, "the window never reopened"
    return pause, window


def test_probe_pauses_double_up_to_their_cap_while_every_probe_misses() -> None:
    policy = closed(SpinPolicy(WINDOW))
    pauses = []
    for _ in range(10):
        pause, probe = pause_then_probe(policy)
        assert probe == 4 * WINDOW  # a probe spins four windows
        assert policy.spinning  # open for the probe's wait
        policy.record(probe, MISS)  # one failed probe closes it again
        assert not policy.spinning
        pauses.append(pause)
    assert pauses == [16, 32, 64, 128, 256, 512, 1024, 1024, 1024, 1024]


def test_a_probe_that_pays_reopens_the_window_and_resets_the_pause() -> None:
    policy = closed(SpinPolicy(WINDOW))
    for _ in range(3):  # three failed probes: the next pause would be 128
        _, probe = pause_then_probe(policy)
        policy.record(probe, MISS)
    _, probe = pause_then_probe(policy)
    policy.record(probe, HIT)
    assert policy.spinning
    assert [policy.next_window() for _ in range(5)] == [WINDOW] * 5
    closed(policy)  # the hit forgot the misses: three more close it again ...
    assert pause_then_probe(policy) == (16, 4 * WINDOW)  # ... for the first pause again


def test_misses_must_come_in_a_row() -> None:
    policy = SpinPolicy(WINDOW)
    for waited in (MISS, MISS, HIT, MISS, MISS, HIT, MISS, MISS):
        policy.record(policy.next_window(), waited)
        assert policy.spinning
    policy.record(policy.next_window(), MISS)
    assert not policy.spinning


def test_a_wait_as_long_as_the_spin_is_a_hit_and_one_ns_longer_a_miss() -> None:
    policy = SpinPolicy(WINDOW)
    for _ in range(10):
        policy.record(WINDOW, WINDOW)
    assert policy.spinning
    for _ in range(3):
        policy.record(WINDOW, WINDOW + 1)
    assert not policy.spinning


def test_one_wait_in_256_sleeps_while_the_window_is_open() -> None:
    policy = SpinPolicy(WINDOW)
    windows = []
    for _ in range(3 * 256):
        windows.append(policy.next_window())
        policy.record(windows[-1], HIT if windows[-1] else 20_000)
    assert [i for i, w in enumerate(windows) if w == 0] == [255, 511, 767]
    assert set(windows) == {0, WINDOW}


def test_sleeping_samples_stop_while_the_window_is_closed() -> None:
    """The closed waits do not count toward the next sleeping sample."""
    policy = SpinPolicy(WINDOW)
    for _ in range(100):
        policy.record(policy.next_window(), HIT)
    closed(policy)
    _, probe = pause_then_probe(policy)
    policy.record(probe, HIT)
    windows = [policy.next_window() for _ in range(300)]
    # 103 open waits before closing; neither the closed waits nor the probe count.
    assert windows.index(0) == 256 - 103 - 1


def test_running_averages_known_answers() -> None:
    average = spin._averaged
    assert average(0, 12_345) == 12_345  # the first sample is the average
    assert average(80_000, 160_000) == 90_000  # an eighth of the way
    assert average(80_000, 0) == 70_000
    assert average(80_000, 79_999) == 79_999  # floor division: -1 // 8 == -1
    assert average(80_000, 320_000) == 110_000  # four times the average counts fully
    assert average(80_000, 10**9) == 110_000  # more is clipped to four times
    assert average(7, 8) == 7  # 1 // 8: a small difference moves nothing


def test_spinning_and_sleeping_waits_have_their_own_averages() -> None:
    policy = SpinPolicy(WINDOW)
    policy.record(WINDOW, 10_000)
    policy.record(0, 40_000)
    assert (policy.spun_ns, policy.slept_ns) == (10_000, 40_000)
    policy.record(WINDOW, 18_000)
    policy.record(0, 48_000)
    assert (policy.spun_ns, policy.slept_ns) == (11_000, 41_000)


def test_spinning_slower_than_sleeping_counts_as_a_miss_even_when_caught() -> None:
    policy = SpinPolicy(WINDOW)
    policy.record(0, 20_000)  # sleeping answers in 20 us
    for _ in range(2):
        policy.record(WINDOW, 30_000)  # spinning catches it, at 30 us: a miss
        assert policy.spinning
    policy.record(WINDOW, 30_000)
    assert not policy.spinning


def test_spinning_as_fast_as_sleeping_or_sleeping_unknown_is_a_hit() -> None:
    unknown = SpinPolicy(WINDOW)  # no sleeping wait measured yet: nothing to compare
    for _ in range(10):
        unknown.record(WINDOW, 30_000)
    assert unknown.spinning and unknown.slept_ns == 0
    equal = SpinPolicy(WINDOW)
    equal.record(0, 30_000)
    for _ in range(10):
        equal.record(WINDOW, 30_000)
    assert equal.spinning and equal.spun_ns == equal.slept_ns == 30_000


def test_a_probe_forgets_the_stale_spinning_average() -> None:
    policy = SpinPolicy(WINDOW)
    policy.record(0, 20_000)
    for _ in range(3):
        policy.record(WINDOW, 30_000)  # slower than sleeping: closed
    assert not policy.spinning and policy.spun_ns == 30_000
    _, probe = pause_then_probe(policy)
    assert policy.spun_ns == 0
    policy.record(probe, 10_000)  # the probe's wait is the whole new average
    assert policy.spun_ns == 10_000
    assert policy.spinning


def test_a_failed_probe_on_a_busy_machine_closes_again() -> None:
    """A caught probe that still waited longer than sleeping is a failed probe."""
    policy = SpinPolicy(WINDOW)
    policy.record(0, 20_000)
    for _ in range(3):
        policy.record(WINDOW, 30_000)
    _, probe = pause_then_probe(policy)
    policy.record(probe, 30_000)  # caught within the probe, but slower than sleeping
    assert not policy.spinning
    assert pause_then_probe(policy)[0] == 32


@pytest.mark.parametrize("window, expected", [(0, 0), (-5, 0), (1.9, 1), (WINDOW, WINDOW)])
def test_the_window_is_a_non_negative_int(window: float, expected: int) -> None:
    policy = SpinPolicy(window)  # type: ignore[arg-type]
    assert policy.window_ns == expected and type(policy.window_ns) is int
    assert policy.spinning == (expected > 0)


def test_a_zero_window_learns_nothing_and_never_spins() -> None:
    policy = SpinPolicy(0)
    for _ in range(600):
        window = policy.next_window()
        assert window == 0
        policy.record(window, 10**9)
        policy.record(1, 10**9)  # even a wait that claims to have spun
    assert (policy.spun_ns, policy.slept_ns) == (0, 0)
    assert not policy.spinning


def test_a_sleeping_average_of_one_ns_still_counts() -> None:
    """Only 0 means "no sleeping wait measured yet"; any measured average is compared."""
    policy = SpinPolicy(WINDOW)
    policy.record(0, 1)
    for _ in range(3):
        policy.record(WINDOW, 2)  # caught, yet slower than sleeping
    assert not policy.spinning


def serve(policy: SpinPolicy, waits: int, spinning_ns: int, sleeping_ns: int) -> None:
    """``waits`` waits reported in runs as a loop in C reports them: each of
    ``spinning_ns`` with a window, ``sleeping_ns`` without."""
    done = 0
    while done < waits:
        window, run = policy.window_run()
        wait = spinning_ns if window else sleeping_ns
        if window and wait > window:
            policy.record_run(window, 1, wait, wait)  # the run ends at its miss
            done += 1
            continue
        n = min(run or waits, waits - done)
        policy.record_run(window, n, n * wait)
        done += n


def test_a_run_of_waits_moves_an_average_as_the_same_waits_one_by_one() -> None:
    one_by_one, at_once = SpinPolicy(WINDOW), SpinPolicy(WINDOW)
    for policy in (one_by_one, at_once):
        policy.record(0, 5_000)
    for _ in range(64):
        one_by_one.record(0, 110_000)
    at_once.record_run(0, 64, 64 * 110_000)
    assert one_by_one.slept_ns == 109_963
    assert at_once.slept_ns == 107_629  # 32 steps: within 1.4% of the way left
    assert spin._averaged(5_000, 110_000, 1) == 6_875  # one sample: clipped, as ever
    assert spin._averaged(0, 110_000, 64) == 110_000  # the first sample is the average


def test_both_ends_asleep_after_a_stall_reopen_at_the_first_probe_that_beats_sleeping() -> None:
    """A stall of a few ms (the host took the CPU) makes three misses in a
    row at both ends of a burst, and both close.  From then on every wait
    meets a sleeping peer: ~113 us asleep, ~85 us for a probe that spins
    (it skips its own wake-up).  The probe beats sleeping, so it must
    reopen the window, although sleeping took 6 us while the peer spun."""
    policy = SpinPolicy(200_000)
    serve(policy, 5_000, 2_300, 6_000)  # the peer spins: hits, sleeping samples of 6 us
    assert policy.spinning and policy.slept_ns < 10_000
    for stalled in (1_800_000, 760_000, 450_000):
        policy.record(policy.next_window(), stalled)
    assert not policy.spinning
    serve(policy, 16, 85_000, 113_000)  # the pause: 16 sleeping waits
    assert policy.slept_ns > 85_000  # near what sleeping costs now, not what it cost
    window, _ = policy.window_run()
    assert window == 800_000  # the probe
    serve(policy, 1, 85_000, 113_000)
    assert policy.spinning


def test_the_first_waits_of_a_burst_are_not_judged() -> None:
    """A burst's first requests are slow for reasons of their own (the server
    maps the pools and arms its C path): with a warm-up they neither close
    the window nor move the averages; the wait after them is judged."""
    assert spin.WARM_UP == 16
    policy = SpinPolicy(WINDOW, warm_up=16)
    policy.record_run(WINDOW, 10, 10 * HIT)
    for _ in range(6):
        policy.record(policy.next_window(), MISS)
    assert policy.spinning and (policy.spun_ns, policy.slept_ns) == (0, 0)
    policy.record(0, 40_000)
    assert policy.slept_ns == 40_000
    closed(policy)
