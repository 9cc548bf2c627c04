"""``Compilation``: a finished model prepared for its devices (``ANeuralNetworksCompilation``).

Settings (preference, priority, timeout, caching) are collected first, then
``finish()`` assigns each operation to the best device that supports it and
prepares the resulting steps (see :mod:`nnburst.partition`).  A model that
runs whole on one device keeps that driver's prepared model; a partitioned
one is run by an ``ExecutionPlan``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from . import deadlines, tracing
from .checks import require, require_duration
from .codes import PreferenceCode, PriorityCode, ResultCode
from .devices import Device, get_devices
from .errors import BadDataError, BadStateError, NNError
from .hal.interfaces import IPreparedModel
from .model import Model
from .partition import compile_plan

__all__ = ["Compilation"]

logger = logging.getLogger("nnburst.compilation")

#: Length of a caching token (``ANEURALNETWORKS_BYTE_SIZE_OF_CACHE_TOKEN``).
CACHE_TOKEN_BYTES = 32


class Compilation:
    """A model compiled for a device; a context manager (``close()`` is idempotent).

    ``devices`` given is ``createForDevices``: only those devices are used and
    every operation must be supported by one of them (else ``BAD_DATA``).
    """

    def __init__(self, model: Model, devices: Sequence[Device] | None = None) -> None:
        require(model, "Compilation: model")
        if not isinstance(model, Model):
            raise BadDataError(
                f"Compilation: expected an nnburst.Model, got {type(model).__name__}"
            )
        if not model.finished:
            raise BadStateError("Compilation: the model is not finished")
        self._model = model
        self._explicit: list[Device] | None = None
        if devices is not None:
            chosen = list(devices)
            if not chosen:
                raise BadDataError("Compilation: an empty device list")
            for device in chosen:
                if not isinstance(device, Device):
                    raise BadDataError(f"Compilation: {device!r} is not an nnburst.Device")
            if len({id(d) for d in chosen}) != len(chosen):
                raise BadDataError("Compilation: a device is listed twice")
            self._explicit = chosen
        self._preference = PreferenceCode.FAST_SINGLE_ANSWER
        self._priority = PriorityCode.DEFAULT
        self._timeout_ns = 0
        self._cache: tuple[str, bytes] | None = None
        self._finished = False
        self._failed: str | None = None
        self._closed = False
        self._device: Device | None = None
        self._prepared: IPreparedModel | None = None
        self._lock = threading.Lock()

    # -- settings ----------------------------------------------------------------------------
    def _check_settable(self, what: str) -> None:
        if self._closed:
            raise BadStateError(f"{what}: the compilation is closed")
        if self._finished:
            raise BadStateError(f"{what}: the compilation is already finished")

    def set_preference(self, preference: PreferenceCode) -> None:
        """Trade-off the driver should make (default FAST_SINGLE_ANSWER)."""
        with self._lock:
            self._check_settable("set_preference")
            try:
                self._preference = PreferenceCode(preference)
            except ValueError:
                raise BadDataError(f"set_preference: unknown preference {preference!r}") from None

    def set_priority(self, priority: PriorityCode) -> None:
        with self._lock:
            self._check_settable("set_priority")
            try:
                self._priority = PriorityCode(priority)
            except ValueError:
                raise BadDataError(f"set_priority: unknown priority {priority!r}") from None

    def set_timeout(self, duration_ns: int) -> None:
        """Maximum time to prepare the model; 0 means none.

        As in the NDK only a compilation for exactly one explicit device may
        have a timeout (``BAD_DATA`` otherwise); devices older than feature
        level 4 ignore it.
        """
        with self._lock:
            self._check_settable("set_timeout")
            duration_ns = require_duration(duration_ns, "set_timeout")
            if self._explicit is None or len(self._explicit) != 1:
                raise BadDataError(
                    "set_timeout: only a compilation for exactly one explicit device can have a timeout"
                )
            self._timeout_ns = duration_ns

    def set_caching(self, cache_dir: str | os.PathLike[str], token: bytes) -> None:
        """Where the driver may cache the compiled model, under a 32-byte token unique to the model."""
        with self._lock:
            require(cache_dir, "set_caching: cache_dir")
            require(token, "set_caching: token")
            self._check_settable("set_caching")
            if not isinstance(cache_dir, (str, os.PathLike)):
                raise BadDataError(
                    f"set_caching: cache_dir must be a path, got {type(cache_dir).__name__}"
                )
            try:
                raw = bytes(token)
            except TypeError:
                raise BadDataError(
                    f"set_caching: token must be bytes, got {type(token).__name__}"
                ) from None
            if len(raw) != CACHE_TOKEN_BYTES:
                raise BadDataError(
                    f"set_caching: token must be {CACHE_TOKEN_BYTES} bytes, got {len(raw)}"
                )
            self._cache = (os.fspath(cache_dir), raw)

    # -- finishing ---------------------------------------------------------------------------
    def finish(self) -> None:
        """Assign the operations to devices and prepare the model on them.

        Raises:
            BadStateError: finished twice, or closed.
            BadDataError: some operation is supported by none of the devices
                (the given ones, or all); the message names the operations.
            NNError: a driver failed to prepare its part and there is no CPU
                fallback (explicit devices).
        """
        with self._lock:
            self._check_settable("finish")
            self._finished = True
            try:
                with tracing.span(tracing.Layer.RUNTIME, tracing.Phase.COMPILATION, "finish"):
                    self._device, self._prepared = self._prepare()
            except NNError as exc:
                self._failed = str(exc)
                raise
            except Exception as exc:
                self._failed = f"{type(exc).__name__}: {exc}"
                raise NNError(
                    f"Compilation.finish: the driver failed: {self._failed}", ResultCode.OP_FAILED
                ) from exc

    def _prepare(self) -> tuple[Device | None, IPreparedModel]:
        # Partitioning, preparing and CPU fallback live in partition.py; explicit
        # devices (createForDevices) never fall back to the CPU.
        hal_model = self._model.hal_model
        candidates = self._explicit if self._explicit is not None else get_devices()
        deadline = deadlines.after(self._timeout_ns)
        return compile_plan(
            hal_model,
            candidates,
            self._preference,
            self._priority,
            deadline,
            self._cache,
            allow_fallback=self._explicit is None,
        )

    # -- state used by executions and bursts -------------------------------------------------
    def prepared_for(self, what: str) -> IPreparedModel:
        """The prepared model an execution or burst runs; ``BAD_STATE`` naming ``what``
        unless the compilation finished successfully and is open."""
        if self._closed:
            raise BadStateError(f"{what}: the compilation is closed")
        if not self._finished:
            raise BadStateError(f"{what}: the compilation is not finished")
        if self._prepared is None:
            raise BadStateError(f"{what}: the compilation failed ({self._failed})")
        return self._prepared

    @property
    def model(self) -> Model:
        return self._model

    @property
    def finished(self) -> bool:
        return self._finished and self._prepared is not None

    @property
    def device(self) -> Device | None:
        """The device the whole model was prepared for (None before a successful finish, or when
        the model is partitioned over several devices: see ``prepared_model.steps``)."""
        return self._device

    @property
    def prepared_model(self) -> IPreparedModel:
        """The driver's prepared model (``BAD_STATE`` unless finished successfully)."""
        return self.prepared_for("prepared_model")

    @property
    def preference(self) -> PreferenceCode:
        return self._preference

    @property
    def single_explicit_device(self) -> bool:
        """Created for exactly one device: the NDK's condition for timeouts and timing."""
        return self._explicit is not None and len(self._explicit) == 1

    def close(self) -> None:
        """Drop the prepared model; executions already created keep working on it."""
        with self._lock:
            self._closed = True
            self._prepared = None

    def __enter__(self) -> Compilation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
