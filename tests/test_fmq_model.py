"""Hypothesis state machines: the queue behaves like a bounded deque.

Synchronized: a ``collections.deque`` with a capacity (writes that do not fit
fail).  Unsynchronized: writes always succeed, and a reader that fell more
than a ring behind fails once and then holds the newest half.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nnburst.fmq import Flavor, MessageQueue

CAPACITY = 37  # odd on purpose: offsets wrap at non-power-of-two boundaries


class SynchronizedQueueModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.queue = MessageQueue(np.uint16, CAPACITY)
        self.model: deque[int] = deque()
        self.next_value = 0

    def values(self, n: int) -> np.ndarray:
        values = (np.arange(self.next_value, self.next_value + n) & 0xFFFF).astype(np.uint16)
        self.next_value += n
        return values

    @rule(n=st.integers(0, CAPACITY + 3))
    def write(self, n: int) -> None:
        values = self.values(n)
        fits = n <= CAPACITY - len(self.model)
        assert self.queue.write(values) == fits
        if fits:
            self.model.extend(values.tolist())

    @rule(n=st.integers(1, CAPACITY + 3))
    def read(self, n: int) -> None:
        got = self.queue.read(n)
        if n <= len(self.model):
            assert got is not None
            assert got.tolist() == [self.model.popleft() for _ in range(n)]
        else:
            assert got is None

    @rule(n=st.integers(1, CAPACITY), data=st.data())
    def zero_copy_write(self, n: int, data: st.DataObject) -> None:
        tx = self.queue.begin_write(n)
        if n > CAPACITY - len(self.model):
            assert tx is None
            return
        values = self.values(n)
        tx.copy_to(values)
        commit = data.draw(st.integers(0, n), label="commit")
        assert self.queue.commit_write(commit)
        self.model.extend(values[:commit].tolist())

    @rule(n=st.integers(1, CAPACITY))
    def zero_copy_read(self, n: int) -> None:
        rx = self.queue.begin_read(n)
        if n > len(self.model):
            assert rx is None
            return
        assert rx.copy_from().tolist() == list(self.model)[:n]
        assert self.queue.commit_read(n)
        for _ in range(n):
            self.model.popleft()

    @precondition(lambda self: len(self.model) > 0)
    @rule()
    def blocking_read_of_what_is_there(self) -> None:
        n = len(self.model)
        got = self.queue.read_blocking(n, timeout_ns=1_000_000)
        assert got.tolist() == [self.model.popleft() for _ in range(n)]

    @invariant()
    def counts_match(self) -> None:
        assert self.queue.available_to_read() == len(self.model)
        assert self.queue.available_to_write() == CAPACITY - len(self.model)

    def teardown(self) -> None:
        self.queue.close()


class UnsynchronizedQueueModel(RuleBasedStateMachine):
    """One writer and one reader object; the model is the reader's view."""

    def __init__(self) -> None:
        super().__init__()
        self.writer = MessageQueue(np.uint16, CAPACITY, Flavor.UNSYNCHRONIZED_WRITE)
        self.reader = MessageQueue.attach(self.writer.descriptor)
        self.stream: list[int] = []  # everything ever written
        self.read_pos = 0  # index in stream of the reader's next element

    @rule(n=st.integers(0, CAPACITY + 3))
    def write(self, n: int) -> None:
        values = [(len(self.stream) + i) & 0xFFFF for i in range(n)]
        ok = self.writer.write(np.array(values, dtype=np.uint16))
        assert ok == (n <= CAPACITY)
        if ok:
            self.stream.extend(values)

    @rule(n=st.integers(1, CAPACITY + 3))
    def read(self, n: int) -> None:
        behind = len(self.stream) - self.read_pos
        got = self.reader.read(n)
        if behind > CAPACITY:
            assert got is None  # overrun: fail once, resync to the newest half
            self.read_pos = len(self.stream) - CAPACITY // 2
        elif n <= behind:
            assert got is not None
            assert got.tolist() == self.stream[self.read_pos : self.read_pos + n]
            self.read_pos += n
        else:
            assert got is None

    @invariant()
    def available_matches(self) -> None:
        assert self.reader.available_to_read() == len(self.stream) - self.read_pos

    def teardown(self) -> None:
        self.reader.close()
        self.writer.close()


TestSynchronizedQueueModel = SynchronizedQueueModel.TestCase
TestUnsynchronizedQueueModel = UnsynchronizedQueueModel.TestCase
