"""The app side of the driver service: HAL proxies for devices in another process.

One :class:`ServiceClient` (one socket, one reader thread) per service path,
shared by every :class:`RemoteDevice` of that service and by its bursts (the
:class:`~nnburst.service.burst.RemoteBurstClient` on the same connection
answers the service's memory callbacks).  When the service dies the
connection breaks every pending call at once: control calls raise
:class:`~nnburst.errors.BrokenResourceError` (``DEAD_OBJECT``), executions
return ``DEVICE_UNAVAILABLE``, bursts see their FMQs torn down.

Request pools must be fd-backed :class:`~nnburst.hal.memory.MappedMemory`
objects (an ``nnburst.Memory`` is one; see :mod:`nnburst.hal.staging`): the
fds cross with SCM_RIGHTS and the service maps the very same pages.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import stat
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from .. import deadlines, tracing
from ..codes import ErrorStatus, PreferenceCode, PriorityCode
from ..errors import BrokenResourceError, NNError, status_for_result_code
from ..hal.burst_controller import ExecutionBurstController
from ..hal.interfaces import (
    ExecutionResult,
    IBurstCallback,
    IBurstContext,
    IDevice,
    IExecution,
    IPreparedModel,
)
from ..hal.memory import MappedMemory
from ..hal.model import HalModel
from ..hal.types import (
    DEFAULT_LOOP_TIMEOUT_NS,
    NO_TIMING,
    Capabilities,
    DeviceType,
    MeasureTiming,
    Request,
)
from . import protocol
from .burst import RemoteBurstClient
from .protocol import Kind
from .wire import Connection, Frame

log = logging.getLogger("nnburst.service")

#: Bounds on the slow path: a live but wedged service cannot block an app forever.
CONNECT_TIMEOUT_S = 1.0
#: Pause between connects refused because the service's backlog is full.
CONNECT_RETRY_S = 0.002
QUERY_TIMEOUT_S = 10.0
PREPARE_TIMEOUT_S = 300.0
EXECUTE_TIMEOUT_S = 300.0
#: Extra time granted past a deadline for the reply to travel back.
DEADLINE_SLACK_S = 1.0
#: How long discovery waits for a service's answers before leaving it out.
DISCOVERY_TIMEOUT_S = 2.0


#: The trace phase of each control call (the IPC layer of the seeds' table).
_TRACE_PHASE: dict[int, str] = {
    Kind.PREPARE_MODEL: tracing.Phase.COMPILATION,
    Kind.EXECUTE: tracing.Phase.EXECUTION,
    Kind.RELEASE_MODEL: tracing.Phase.TERMINATION,
}


def _reply_timeout(deadline_ns: int | None, default_s: float) -> float:
    """How long (s) the socket waits for the reply to a call bounded by
    ``deadline_ns``: what is left of it and the slack for the trip back."""
    if deadline_ns is None:
        return default_s
    return deadlines.seconds_left(deadline_ns, DEADLINE_SLACK_S)


def _connect(path: str, timeout: float) -> socket.socket:
    """A connected socket to ``path``.  A Unix socket whose listen backlog is full
    refuses at once (EAGAIN) rather than waiting: during a burst of connects
    that is congestion, not absence, so we try again until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.connect(path)
            sock.settimeout(None)
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"the service at {path} accepted no connection in time"
                ) from None
            time.sleep(CONNECT_RETRY_S)
        except BaseException:
            sock.close()
            raise


class ServiceClient:
    """One connection to one service process."""

    def __init__(self, path: str, connect_timeout: float = CONNECT_TIMEOUT_S) -> None:
        self.path = path
        sock = _connect(path, connect_timeout)
        self.bursts = RemoteBurstClient(sock)
        self.connection = self.bursts.connection
        self._devices: list[RemoteDevice] | None = None
        self.round_trip_us = 0.0
        #: ids of the models prepared on this connection and not yet released
        self.model_ids: set[int] = set()
        self._reconnect_lock = threading.Lock()

    @property
    def broken(self) -> bool:
        """The connection is lost and cannot be replaced: it held models or bursts,
        or the service does not answer a new one."""
        self._reconnect_if_idle_closed()
        return self.connection.broken

    def _reconnect_if_idle_closed(self) -> None:
        """The service closes connections that hold nothing and stay silent (its
        ``--idle-timeout``); such a connection is opened again when needed, and
        the device objects on it stay valid.  One that held models or bursts is
        not: they died with it."""
        if not self.connection.broken or self.model_ids or self.bursts.burst_count:
            return
        with self._reconnect_lock:
            if not self.connection.broken:
                return
            try:
                sock = _connect(self.path, CONNECT_TIMEOUT_S)
            except OSError:
                return  # the caller meets the broken connection
            old, self.bursts = self.bursts, RemoteBurstClient(sock)
            self.connection = self.bursts.connection
            old.close()

    def call(
        self,
        kind: int,
        payload: bytes,
        fds: Sequence[int] = (),
        timeout: float | None = QUERY_TIMEOUT_S,
    ) -> Frame:
        self._reconnect_if_idle_closed()
        with tracing.span(
            tracing.Layer.IPC, _TRACE_PHASE.get(kind, tracing.Phase.INITIALIZATION), Kind(kind).name
        ):
            return self.connection.call(kind, payload, fds, timeout=timeout)

    def measure_round_trip(self, calls: int = 3, timeout: float = QUERY_TIMEOUT_S) -> None:
        """Set :attr:`round_trip_us` to the fastest of a few control round trips: what
        the partitioner adds to every operation it considers sending to this service."""
        best = float("inf")
        for _ in range(calls):
            start = time.perf_counter()
            self.call(Kind.GET_DEVICES, b"", timeout=timeout).close_fds()
            best = min(best, time.perf_counter() - start)
        self.round_trip_us = best * 1e6

    def devices(self, timeout: float = QUERY_TIMEOUT_S) -> list[RemoteDevice]:
        """The service's devices (asked once; the same objects afterwards)."""
        if self._devices is None:
            reply = self.call(Kind.GET_DEVICES, b"", timeout=timeout)
            reply.close_fds()
            infos = protocol.decode_devices(reply.payload)
            self._devices = [RemoteDevice(self, i, info) for i, info in enumerate(infos)]
        return self._devices

    def close(self) -> None:
        self.bursts.close()


class RemoteDevice(IDevice):
    """A device hosted by a service process."""

    def __init__(self, client: ServiceClient, index: int, info: protocol.DeviceInfo) -> None:
        self.client = client
        self.index = index
        self.name = info.name
        try:
            self.type = DeviceType(info.type)
        except ValueError:
            self.type = DeviceType.OTHER
        self.version_string = info.version_string
        self.feature_level = info.feature_level
        self._capabilities: Capabilities | None = None

    @property
    def reach_us(self) -> float:  # type: ignore[override]
        """The service's measured control round trip (see ``ServiceClient.measure_round_trip``)."""
        return self.client.round_trip_us

    @property
    def available(self) -> bool:
        return not self.client.broken

    @property
    def location(self) -> str:  # type: ignore[override]
        """Where the device runs: its service's socket."""
        return f"service {self.client.path}"

    @property
    def capabilities(self) -> Capabilities:
        """Asked once and cached; raises BrokenResourceError if the service is gone."""
        if self._capabilities is None:
            reply = self.client.call(Kind.GET_CAPABILITIES, protocol.encode_u32(self.index))
            reply.close_fds()
            self._capabilities = protocol.decode_capabilities(reply.payload)
        return self._capabilities

    def get_supported_operations(self, model: HalModel) -> list[bool]:
        """Raises BrokenResourceError (``DEAD_OBJECT``) if the service is gone."""
        reply = self.client.call(
            Kind.GET_SUPPORTED_OPERATIONS, protocol.encode_device_model(self.index, model)
        )
        reply.close_fds()
        return protocol.decode_flags(reply.payload, len(model.main.operations))

    def prepare_model(
        self,
        model: HalModel,
        preference: PreferenceCode = PreferenceCode.FAST_SINGLE_ANSWER,
        priority: PriorityCode = PriorityCode.MEDIUM,
        deadline_ns: int | None = None,
        cache: Any = None,
    ) -> RemotePreparedModel:
        """Raises NNError with the service's code, BrokenResourceError if it died."""
        payload = protocol.encode_prepare(
            self.index, int(preference), int(priority), deadline_ns, model
        )
        timeout = _reply_timeout(deadline_ns, PREPARE_TIMEOUT_S)
        reply = self.client.call(Kind.PREPARE_MODEL, payload, timeout=timeout)
        reply.close_fds()
        return RemotePreparedModel(self, protocol.decode_u32(reply.payload))

    def __repr__(self) -> str:
        return f"<RemoteDevice {self.name} at {self.client.path}>"


def _release(client: ServiceClient, connection: Connection, model_id: int) -> None:
    """Release ``model_id`` on the connection it was prepared on (never on a newer one,
    where the id may name another model)."""
    client.model_ids.discard(model_id)
    if connection.broken:
        return
    try:
        connection.notify(Kind.RELEASE_MODEL, protocol.encode_u32(model_id))
    except (NNError, OSError):
        pass


class RemotePreparedModel(IPreparedModel):
    """A model prepared in a service process; released there when this goes away."""

    def __init__(self, device: RemoteDevice, model_id: int) -> None:
        self.device = device
        self.model_id = model_id
        self._client = device.client
        self._client.model_ids.add(model_id)
        self._release = weakref.finalize(
            self, _release, self._client, self._client.connection, model_id
        )

    def execute_synchronously(
        self,
        request: Request,
        measure: MeasureTiming,
        *,
        deadline_ns: int | None = None,
        loop_timeout_ns: int | None = None,
    ) -> ExecutionResult:
        """Never raises for a bad request or a dead service: returns a status."""
        pools = request.pools
        if len(pools) > protocol.MAX_POOLS or not all(
            isinstance(p, MappedMemory) and not p.closed for p in pools
        ):
            log.info(
                "request pools must be open shared memories (nnburst.Memory) to reach a service"
            )
            return ErrorStatus.INVALID_ARGUMENT, [], NO_TIMING
        try:
            payload = protocol.encode_execute(
                self.model_id,
                request,
                int(measure),
                deadline_ns,
                loop_timeout_ns,
                [(p.offset, p.size) for p in pools],
            )
        except Exception as exc:  # a negative offset, a huge rank: struct refuses it
            log.info("cannot encode the request: %s", exc)
            return ErrorStatus.INVALID_ARGUMENT, [], NO_TIMING
        timeout = _reply_timeout(deadline_ns, EXECUTE_TIMEOUT_S)
        try:
            reply = self._client.call(Kind.EXECUTE, payload, [p.fd for p in pools], timeout=timeout)
        except BrokenResourceError as exc:
            log.info("execution failed: %s", exc)
            return ErrorStatus.DEVICE_UNAVAILABLE, [], NO_TIMING
        except NNError as exc:
            return status_for_result_code(exc.code), [], NO_TIMING
        reply.close_fds()
        try:
            status, shapes, timing = protocol.decode_result(reply.payload)
            return ErrorStatus(status), shapes, timing
        except (NNError, ValueError) as exc:
            log.warning("malformed EXECUTE reply: %s", exc)
            return ErrorStatus.GENERAL_FAILURE, [], NO_TIMING

    def create_reusable_execution(
        self, request: Request, measure: MeasureTiming, loop_timeout_ns: int | None = None
    ) -> IExecution:
        """See :class:`RemoteExecution`."""
        return RemoteExecution(self, request, measure, loop_timeout_ns)

    def configure_execution_burst(
        self, callback: IBurstCallback, request_channel: Any, result_channel: Any
    ) -> tuple[ErrorStatus, IBurstContext | None]:
        """A burst served by a worker thread in the service, on this connection."""
        return self._client.bursts.configure(
            self.model_id, callback, request_channel, result_channel
        )

    def close(self) -> None:
        """Release the model in the service now (also done when garbage collected)."""
        self._release()


class RemoteExecution(IExecution):
    """A request computed many times in a service, without per-call setup.

    The first computation is an EXECUTE call like any other.  A second one
    shows the execution is reused: from then on it runs over a burst of its
    own that never polls (the service's worker and this thread sleep on
    futexes between calls), so the pools are mapped in the service once and
    a call is one packet each way instead of a socket message carrying file
    descriptors that the service maps and unmaps.  A loop timeout other than
    the default cannot travel in a burst packet: such executions keep using
    EXECUTE.
    """

    def __init__(
        self,
        prepared: RemotePreparedModel,
        request: Request,
        measure: MeasureTiming,
        loop_timeout_ns: int | None,
    ) -> None:
        self._prepared = prepared
        self._request = request
        self._measure = measure
        self._loop_timeout_ns = loop_timeout_ns
        self._calls = 0
        self._controller: ExecutionBurstController | None = None

    def compute(self, deadline_ns: int | None = None) -> ExecutionResult:
        self._calls += 1
        if self._calls == 2 and self._loop_timeout_ns in (None, DEFAULT_LOOP_TIMEOUT_NS):
            try:
                self._controller = ExecutionBurstController.create(self._prepared)
            except NNError as exc:
                log.info("no burst for a reused execution (%s): staying on EXECUTE", exc)
        controller = self._controller
        if controller is not None:
            pools = self._request.pools
            if all(isinstance(pool, MappedMemory) and not pool.closed for pool in pools):
                status, shapes, timing, fallback = controller.compute(
                    self._request, self._measure, pools, deadline_ns=deadline_ns
                )
                if not fallback:
                    return status, shapes, timing
        return self._prepared.execute_synchronously(
            self._request,
            self._measure,
            deadline_ns=deadline_ns,
            loop_timeout_ns=self._loop_timeout_ns,
        )

    def close(self) -> None:
        controller, self._controller = self._controller, None
        if controller is not None:
            controller.close()


# -- discovery ----------------------------------------------------------------------------

_clients: dict[str, ServiceClient] = {}
_clients_lock = threading.Lock()


def service_paths() -> list[str]:
    """``$NNBURST_SERVICES`` (paths joined by ':'), else the default socket."""
    spec = os.environ.get("NNBURST_SERVICES")
    if spec is None:
        return [protocol.default_socket_path()]
    return [path for path in spec.split(":") if path]


#: Configured paths already warned about, with the reason (one warning each, not one per lookup).
_warned: dict[str, str] = {}


def _unreachable(path: str, why: str, configured: bool) -> None:
    """Say once why a service path gives no devices: configured paths warn, the
    default socket (which is absent whenever no service runs) logs at debug level."""
    if not configured:
        log.debug("no service at the default socket %s: %s", path, why)
        return
    if _warned.get(path) != why:
        _warned[path] = why
        log.warning("nnburst: no devices from the driver service at %s: %s", path, why)


def _why_not_a_socket(path: str) -> str | None:
    """Why ``path`` cannot be a service socket, found without connecting."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "it does not exist (is `nnburst serve` running?)"
    except PermissionError:
        return "a directory on the way to it may not be searched by this user"
    except OSError as exc:
        return f"it cannot be inspected ({exc.strerror or exc})"
    if not stat.S_ISSOCK(info.st_mode):
        return "it is not a socket"
    return None


def _why_no_connection(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "this user may not open it (the socket belongs to another user)"
    if isinstance(exc, ConnectionRefusedError):
        return "nothing listens on it (a service that stopped left it behind)"
    if isinstance(exc, TimeoutError):
        return "the service did not accept the connection in time"
    return f"connecting failed ({exc.strerror or exc})"


def connect(path: str, configured: bool = True) -> ServiceClient | None:
    """The live client for ``path``, reconnecting if the old one broke; None if unreachable
    (logged once per path and reason: a warning for a configured path)."""
    with _clients_lock:
        client = _clients.get(path)
        if client is not None and not client.broken:
            return client
        if client is not None:
            client.close()
            del _clients[path]
        why = _why_not_a_socket(path)
        if why is not None:
            _unreachable(path, why, configured)
            return None
        try:
            client = ServiceClient(path)
        except OSError as exc:
            _unreachable(path, _why_no_connection(exc), configured)
            return None
        try:
            client.devices(timeout=DISCOVERY_TIMEOUT_S)
            client.measure_round_trip(timeout=DISCOVERY_TIMEOUT_S)
        except (NNError, OSError, ValueError) as exc:
            _unreachable(path, f"the service did not answer ({exc})", configured)
            client.close()
            return None
        _warned.pop(path, None)
        _clients[path] = client
        return client


def discover() -> list[IDevice]:
    """Every device of every reachable service; unreachable services add nothing."""
    configured = "NNBURST_SERVICES" in os.environ
    devices: list[IDevice] = []
    for path in service_paths():
        client = connect(path, configured)
        if client is not None:
            devices.extend(client.devices())
    return devices


def disconnect_all() -> None:
    """Close every cached service connection (tests; process shutdown)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


# Connections are cached for the life of the process; close them cleanly at exit
# (the service sees an orderly EOF, and nothing is left for the interpreter to warn about).
atexit.register(disconnect_all)
