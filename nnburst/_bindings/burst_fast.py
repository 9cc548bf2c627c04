"""The burst server's C path (``csrc/burst_fast.h``): a request packet armed
with the plan that answers it, served in C for as long as the client repeats it.

The burst worker (``nnburst/hal/burst_server.py``) decides what may be
armed; this module only fills C's struct, keeps every buffer it points to
alive while armed, and turns C's status into what the round trip's own
wrapper would return or raise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..errors import BadDataError
from .compiled import ffi, lib
from .plan import BoundPlan
from .queue import RoundTrip

#: Bytes of a burst datum (request or result): six 32-bit words.
DATUM_BYTES = 24

_serve = lib.nnb_burst_fast_serve


def _copy_table(copies: Sequence[tuple[Any, Any]]) -> tuple[Any, Any, Any, tuple[Any, ...]]:
    """C's arrays for (source, target) buffer pairs: the targets' pointers, the
    sources' and the byte counts, with what keeps the pointers valid (the
    caller holds it for as long as C may copy).  Raises ``BadDataError`` for
    a read-only target or a pair of different sizes."""
    try:
        to = [ffi.from_buffer(t, require_writable=True) for _, t in copies]
    except (TypeError, ValueError, BufferError) as exc:  # cffi's word for read-only varies
        raise BadDataError(f"a copy into a read-only buffer: {exc}") from None
    from_ = [ffi.from_buffer(s) for s, _ in copies]
    if any(len(t) != len(s) for t, s in zip(to, from_)):
        raise BadDataError("a copy between buffers of different sizes")
    to_c, from_c = ffi.new("void *[]", to), ffi.new("void *[]", from_)
    nbytes = ffi.new("int64_t[]", [len(s) for s in from_])
    return to_c, from_c, nbytes, (to, from_, to_c, from_c, nbytes)


class BurstFastPath:
    """One burst's armed request, or none.

    Threads: :meth:`arm`, :meth:`clear` and :meth:`serve` belong to the burst's
    worker; :meth:`disarm` and :meth:`stop` may come from any thread and only
    set C's flags (the buffers stay alive until the worker clears them)."""

    __slots__ = ("_struct", "_round_trip", "_keep", "packet")

    def __init__(self) -> None:
        self._struct: Any = ffi.new("nnb_burst_fast_t *")
        self._round_trip: RoundTrip | None = None
        self._keep: tuple[Any, ...] = ()
        #: the armed request packet's bytes; empty when nothing is armed
        self.packet = b""

    def bind(self, round_trip: RoundTrip) -> None:
        """The worker's round trip (writes results, reads requests)."""
        self._round_trip = round_trip

    @property
    def bound(self) -> bool:
        """Whether :meth:`bind` gave it a round trip (the worker serves)."""
        return self._round_trip is not None

    def arm(
        self,
        packet: bytes,
        result_words: Sequence[int],
        measure: bool,
        plan: BoundPlan,
        copies: Sequence[tuple[np.ndarray, np.ndarray]],
    ) -> None:
        """Answer ``packet`` with ``result_words`` after running ``plan`` (bound
        to its buffers, each checked there against the plan's sizes) and
        copying each (source, target) of ``copies``."""
        rt = self._round_trip
        if rt is None:
            raise BadDataError("the fast path has no round trip to serve")
        if not packet or len(packet) % DATUM_BYTES or len(result_words) % 6:
            raise BadDataError("a fast path arms whole packets")
        if len(packet) // DATUM_BYTES > rt._struct.reply_capacity:
            raise BadDataError("the packet is longer than the request buffer")
        if len(result_words) // 6 > rt._struct.request_capacity:
            raise BadDataError("the result is longer than the result buffer")
        copy_to, copy_from, copy_bytes, pinned = _copy_table(copies)
        steps, step_count, arena, arena_bytes, tensors, sizes, tensor_count = plan.c_arguments
        self.clear()
        packet_words = np.frombuffer(packet, "<u4").copy()
        result = np.array(result_words, "<u4")
        packet_c = ffi.from_buffer("uint32_t[]", packet_words)
        result_c = ffi.from_buffer("uint32_t[]", result)
        f = self._struct
        f.packet, f.packet_datums = packet_c, len(packet) // DATUM_BYTES
        f.result, f.result_datums = result_c, len(result) // 6
        f.measure = int(measure)
        f.steps, f.step_count = steps, step_count
        f.arena, f.arena_bytes = arena, arena_bytes
        f.tensors, f.tensor_bytes, f.tensor_count = tensors, sizes, tensor_count
        f.copy_count, f.copy_from, f.copy_to, f.copy_bytes = (
            len(copies),
            copy_from,
            copy_to,
            copy_bytes,
        )
        self._keep = (plan, copies, packet_words, result, pinned, packet_c, result_c)
        self.packet = packet
        lib.nnb_burst_fast_arm(f)

    def disarm(self) -> None:
        """The next packet goes to Python (any thread; C sees it before its next request)."""
        lib.nnb_burst_fast_disarm(self._struct)

    def stop(self) -> None:
        """The burst is ending: C serves nothing more (any thread)."""
        lib.nnb_burst_fast_stop(self._struct)

    def clear(self) -> None:
        """Disarm and let go of every buffer (the worker, while C does not run)."""
        lib.nnb_burst_fast_disarm(self._struct)
        f = self._struct
        f.packet_datums = f.result_datums = f.step_count = f.tensor_count = f.copy_count = 0
        if self._keep:
            self._keep[0].close()  # the pools' mappings may close from now on
        self._keep = ()
        self.packet = b""

    @property
    def missed_ns(self) -> int:
        """How long the last wait took when :meth:`serve` returned for a missed spin
        window (its packet not looked at yet); 0 when it returned for any other reason."""
        return int(self._struct.missed_ns)

    @property
    def waits(self) -> int:
        """Waits for a request the last :meth:`serve` finished (a missed last one included)."""
        return int(self._struct.waits)

    @property
    def waited_ns(self) -> int:
        """The lengths of those waits, summed."""
        return int(self._struct.waited_ns)

    @property
    def served(self) -> int:
        """Requests C has answered on this burst."""
        return int(self._struct.served)

    @property
    def spun(self) -> int:
        """Waits in C that a spin window caught (no futex sleep) on this burst."""
        return int(self._struct.spun)

    def serve(self, n: int, spin_ns: int, max_waits: int = 0) -> int:
        """Serve the ``n``-datum packet just read, and its repeats, in C; the
        length of the first packet C left to Python (in the request buffer).
        C comes back after ``max_waits`` waits (0: no limit) or a wait that
        missed the ``spin_ns`` window, its packet unlooked-at, for the spin
        policy to record :attr:`waits`, :attr:`waited_ns` and :attr:`missed_ns`.
        Raises as the round trip does when the queues fail or are torn down."""
        rt = self._round_trip
        assert rt is not None
        rc: int = _serve(self._struct, rt._struct, n, spin_ns, max_waits)
        if rc > 0:
            return rc
        return rt._settle(rc, int(self._struct.result_datums), None, spin_ns)


_repeat = lib.nnb_burst_repeat
#: what :class:`BurstRepeat` returns for the expected answer (outputs copied)
ANSWERED: int = lib.NNB_REPEAT_ANSWERED


class SpinRuns(Protocol):
    """What :class:`BurstRepeat` asks of a spin policy (``nnburst.hal.spin.SpinPolicy``)."""

    def window_run(self) -> tuple[int, int]: ...

    def record_run(
        self, window_ns: int, waits: int, waited_ns: int, missed_ns: int = 0
    ) -> None: ...


class BurstRepeat:
    """The client's end (``nnb_burst_repeat``): the packet already in the round
    trip's request buffer sent again, the inputs copied into the staging memory
    first and, when the answer is ``result`` word for word, the outputs copied
    back after: one C call for a repeated execution.

    ``repeat(deadline_ns)`` returns :data:`ANSWERED` when the answer was the
    expected one, outputs copied; otherwise its length as the round trip
    returns it (0: none by the deadline; raises as it raises).  A deadline of
    0 is ``wait_limit_ns`` from the call.  The waits reach ``policy`` in runs, as the
    server's do (see ``nnburst/hal/spin.py``): :meth:`flush` hands over the
    ones not reported yet, before anyone else waits with the same policy.
    Only the thread that owns the round trip calls it."""

    __slots__ = ("_struct", "_round_trip", "_keep", "_datums", "_policy")

    def __init__(
        self,
        round_trip: RoundTrip,
        packet_datums: int,
        result: bytes,
        copies_in: Sequence[tuple[memoryview, memoryview]],
        copies_out: Sequence[tuple[memoryview, memoryview]],
        policy: SpinRuns,
        wait_limit_ns: int,
    ) -> None:
        """``copies_in``/``copies_out``: (source, target) byte views of equal
        sizes, each kept exported (pinned) for as long as this lives."""
        rt = round_trip._struct
        if not 0 < packet_datums <= rt.request_capacity:
            raise BadDataError(f"a {packet_datums}-datum packet does not fit the request buffer")
        if (
            not result
            or len(result) % DATUM_BYTES
            or len(result) // DATUM_BYTES > rt.reply_capacity
        ):
            raise BadDataError("an expected answer is whole datums that fit the reply buffer")
        words = np.frombuffer(result, "<u4").copy()
        in_to, in_from, in_bytes, pinned_in = _copy_table(copies_in)
        out_to, out_from, out_bytes, pinned_out = _copy_table(copies_out)
        result_c = ffi.from_buffer("uint32_t[]", words)
        self._struct: Any = ffi.new(
            "nnb_burst_repeat_t *",
            {
                "rt": rt,
                "packet_datums": packet_datums,
                "result": result_c,
                "result_datums": len(words) // 6,
                "in_count": len(copies_in),
                "in_to": in_to,
                "in_from": in_from,
                "in_bytes": in_bytes,
                "out_count": len(copies_out),
                "out_to": out_to,
                "out_from": out_from,
                "out_bytes": out_bytes,
                "wait_limit_ns": wait_limit_ns,
            },
        )
        self._round_trip = round_trip
        self._datums = packet_datums
        self._policy = policy
        self._keep = (words, result_c, pinned_in, pinned_out)
        self.flush()  # takes the policy's window

    @property
    def answered(self) -> int:
        """Calls answered with the expected result, outputs copied in C."""
        return int(self._struct.answered)

    def flush(self) -> None:
        """Report the waits since the last report to the policy and take its
        window afresh: the policy is someone else's until the next call."""
        r = self._struct
        if r.waits:
            self._policy.record_run(r.spin_ns, r.waits, r.waited_ns, r.missed_ns)
        r.waits = r.waited_ns = r.missed_ns = r.due = 0
        r.spin_ns, r.max_waits = self._policy.window_run()

    def __call__(self, deadline_ns: int = 0) -> int:
        r = self._struct
        rc: int = _repeat(r, deadline_ns)
        if rc == ANSWERED:  # the hot path: one comparison
            return rc
        if r.due:
            self.flush()
        if rc > 0:
            return ANSWERED if r.same else rc
        return self._round_trip._settle(rc, self._datums, r.deadline_ns, r.spin_ns)
