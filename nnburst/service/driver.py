"""The driver service process (``nnburst serve``): sample devices behind a socket.

Android runs each driver in its own process and apps reach it over binder;
this is that process.  It hosts several sample devices built on the CPU
reference driver, each declaring different capabilities (like Android's
sample drivers), and serves one control connection per app:

* each accepted connection gets one :class:`~nnburst.service.wire.Connection`
  (one reader thread) serving the calls of :mod:`nnburst.service.protocol`
  and the burst calls of :mod:`nnburst.service.burst`;
* prepared models belong to the connection that prepared them and are
  released when that app disconnects or dies (socket EOF);
* the socket lives in a 0700 directory, is 0600, and every peer's uid is
  checked with ``SO_PEERCRED``;
* SIGTERM / SIGINT close every connection and unlink the socket.

The process's command line (``nnburst serve``, its options and limits) is
:mod:`nnburst.tools.serve`; the service tests' faults are :mod:`.fault_hook`.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import resource
import select
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..codes import (
    ErrorStatus,
    OperandCode,
    OperationCode,
    PreferenceCode,
    PriorityCode,
    ResultCode,
)
from ..cpu import calibration
from ..cpu.driver import (
    FEATURE_LEVEL,
    CpuPreparedModel,
    supported_operations,
)
from ..errors import BadDataError, NNError, status_for_exception
from ..hal import cancellation
from ..hal.burst_controller import CHANNEL_LENGTH, polling_window_us
from ..hal.burst_server import MAX_CACHED_SLOTS, ExecutionBurstServer
from ..hal.interfaces import (
    ExecutionResult,
    IBurstCallback,
    IBurstContext,
    IDevice,
    IExecution,
    IPreparedModel,
)
from ..hal.memory import MappedMemory, drop_fd
from ..hal.model import HalModel, Operation, Subgraph
from ..hal.types import NO_TIMING, Capabilities, DeviceType, MeasureTiming, PerformanceInfo, Request
from ..operands import QUANTIZED_CODES
from . import fault_hook, protocol
from .burst import BurstHost, MappingBudget
from .protocol import Kind
from .wire import MAX_PAYLOAD, Connection, Frame, ReceiveBudget

log = logging.getLogger("nnburst.service")

VENDOR = "nnburst"
#: What a device declares for work it cannot do (HAL: FLT_MAX).
UNSUPPORTED = PerformanceInfo(3.4028234663852886e38, 3.4028234663852886e38)
_FLOAT_CODES = frozenset(
    {
        OperandCode.TENSOR_FLOAT32,
        OperandCode.TENSOR_FLOAT16,
        OperandCode.FLOAT32,
        OperandCode.FLOAT16,
    }
)
_CONTROL_FLOW = frozenset({OperationCode.IF, OperationCode.WHILE})
_MINIMAL_OPS = frozenset(
    {
        OperationCode.ADD,
        OperationCode.MUL,
        OperationCode.SUB,
        OperationCode.RELU,
        OperationCode.RESHAPE,
        OperationCode.CONCATENATION,
        OperationCode.FULLY_CONNECTED,
    }
)


# -- sample devices ----------------------------------------------------------------------


OperationFilter = Callable[[Subgraph, Operation], bool]


def _first_input_code(subgraph: Subgraph, operation: Operation) -> OperandCode | None:
    if not operation.inputs:
        return None
    return subgraph.operands[operation.inputs[0]].info.code


def _any_operation(subgraph: Subgraph, operation: Operation) -> bool:
    return True


def _float_operation(subgraph: Subgraph, operation: Operation) -> bool:
    """As SampleDriverFloat*: judged by the first input's type."""
    return operation.code in _CONTROL_FLOW or _first_input_code(subgraph, operation) in _FLOAT_CODES


def _quant_operation(subgraph: Subgraph, operation: Operation) -> bool:
    return (
        operation.code in _CONTROL_FLOW or _first_input_code(subgraph, operation) in QUANTIZED_CODES
    )


def _minimal_operation(subgraph: Subgraph, operation: Operation) -> bool:
    return operation.code in _MINIMAL_OPS


class LongExecutions:
    """Executions of models with a WHILE loop (their run time is the data's to
    choose, up to the loop timeout) one connection may run at once: each burst
    is a thread, and a client must not keep every core looping."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._running = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            if self._running >= self.limit:
                raise NNError(
                    f"this connection runs {self.limit} executions of models with WHILE loops "
                    "at once, the limit (nnburst serve --max-long-executions): wait for one",
                    ResultCode.RESOURCE_EXHAUSTED_TRANSIENT,
                )
            self._running += 1

    def leave(self) -> None:
        with self._lock:
            self._running -= 1


class _HookedExecution(IExecution):
    """A driver execution with the service's ``execute`` fault hook in front, that
    stops when its client is gone and counts against the client's long executions."""

    def __init__(self, execution: IExecution, prepared: SamplePreparedModel) -> None:
        self._execution = execution
        self._alive = prepared.alive
        self._long = prepared.long_executions if prepared.loops else None

    def compute(self, deadline_ns: int | None = None) -> ExecutionResult:
        if fault_hook.ARMED:
            try:
                fault_hook.apply("execute", self._alive)
            except NNError as exc:
                return status_for_exception(exc), [], NO_TIMING
        long = self._long
        if long is None:
            return self._execution.compute(deadline_ns)
        try:
            long.enter()
        except NNError as exc:
            return status_for_exception(exc), [], NO_TIMING
        try:
            with cancellation.cancelled_when(lambda: not self._alive()):
                return self._execution.compute(deadline_ns)
        finally:
            long.leave()

    def burst_plan(self) -> Any:
        """The driver execution's C plan for a burst's C path, unless a fault
        hook is armed or the model may loop (those need this wrapper's Python)."""
        if fault_hook.ARMED or self._long is not None:
            return None
        plan = getattr(self._execution, "burst_plan", None)
        return None if plan is None else plan()

    def close(self) -> None:
        self._execution.close()


class SamplePreparedModel(IPreparedModel):
    """A CPU prepared model with the service's fault hooks on its execution path."""

    def __init__(self, model: CpuPreparedModel, alive: Callable[[], bool]) -> None:
        self.model = model
        #: False once the client is gone: a long execution then stops
        self.alive = alive
        #: memories one burst on this model may cache (the session sets its limit)
        self.max_cached_memories = MAX_CACHED_SLOTS
        #: whether an execution may loop (a WHILE, in a referenced subgraph)
        self.loops = bool(model.model.referenced)
        #: the connection's count of running executions that may loop (the session's)
        self.long_executions = LongExecutions(MAX_LONG_EXECUTIONS_PER_CONNECTION)

    def create_reusable_execution(
        self, request: Request, measure: MeasureTiming, loop_timeout_ns: int | None = None
    ) -> IExecution:
        """The CPU driver's reusable execution (a burst's repeated request is
        validated and mapped once), behind the same fault hook."""
        return _HookedExecution(
            self.model.create_reusable_execution(request, measure, loop_timeout_ns), self
        )

    def execute_synchronously(
        self,
        request: Request,
        measure: MeasureTiming,
        *,
        deadline_ns: int | None = None,
        loop_timeout_ns: int | None = None,
    ) -> ExecutionResult:
        return self.create_reusable_execution(request, measure, loop_timeout_ns).compute(
            deadline_ns
        )

    def configure_execution_burst(
        self, callback: IBurstCallback, request_channel: Any, result_channel: Any
    ) -> tuple[ErrorStatus, IBurstContext | None]:
        window = polling_window_us(self.model.preference)
        try:
            context = ExecutionBurstServer.create(
                callback,
                request_channel,
                result_channel,
                self,
                polling_window_us=window,
                max_cached_slots=self.max_cached_memories,
            )
        except (ValueError, NNError) as exc:
            log.info("cannot start a burst server: %s", exc)
            return ErrorStatus.GENERAL_FAILURE, None
        return ErrorStatus.NONE, context


class SampleDevice(IDevice):
    """A CPU-reference device that supports only what ``accepts`` allows."""

    def __init__(
        self,
        device_name: str,
        device_type: DeviceType,
        feature_level: int,
        capabilities: Capabilities,
        accepts: OperationFilter,
    ) -> None:
        self.name = f"{VENDOR}-{device_name}"
        self.type = device_type
        self.version_string = f"{self.name} {__version__} (sample driver)"
        self.feature_level = feature_level
        self._capabilities = capabilities
        self._accepts = accepts

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def get_supported_operations(self, model: HalModel) -> list[bool]:
        return supported_operations(model, self._accepts)

    def prepare_model(
        self,
        model: HalModel,
        preference: PreferenceCode = PreferenceCode.FAST_SINGLE_ANSWER,
        priority: PriorityCode = PriorityCode.MEDIUM,
        deadline_ns: int | None = None,
        cache: Any = None,
        alive: Callable[[], bool] = lambda: True,
    ) -> SamplePreparedModel:
        fault_hook.apply("prepare", alive)
        if deadline_ns is not None and time.monotonic_ns() > deadline_ns:
            raise NNError(
                "prepare_model: the deadline passed", ResultCode.MISSED_DEADLINE_PERSISTENT
            )
        if not all(self.get_supported_operations(model)):
            raise BadDataError(f"{self.name} does not support every operation of the model")
        return SamplePreparedModel(CpuPreparedModel(model, preference), alive)


def _capabilities(
    default: PerformanceInfo,
    special: dict[frozenset[OperandCode], PerformanceInfo],
    control_flow: PerformanceInfo,
) -> Capabilities:
    table = {code: default for code in OperandCode}
    for codes, perf in special.items():
        for code in codes:
            table[code] = perf
    return Capabilities(default, default, table, control_flow, control_flow)


def _measured(code: OperandCode) -> PerformanceInfo:
    """The sample devices' backend against the bare reference kernels on an ADD of
    ``code`` tensors: the ratio NNAPI's capabilities ask for.  Their backend *is*
    the reference, but it is timed like any other backend would be (and without
    the test fault hooks, which must not fire at start-up).  Power is not metered
    here, so it is declared equal to the time ratio."""
    model = calibration.calibration_model(code, 4096)
    backend, reference = CpuPreparedModel(model), CpuPreparedModel(model)
    ratio = calibration.measured_ratio(
        calibration.run_once(backend, model), calibration.run_once(reference, model)
    )
    return PerformanceInfo(ratio, ratio)


def measure_figures() -> tuple[PerformanceInfo, PerformanceInfo]:
    """The sample devices' float32 and quant8 figures, measured now."""
    return _measured(OperandCode.TENSOR_FLOAT32), _measured(OperandCode.TENSOR_QUANT8_ASYMM)


#: The sample devices: name, type, feature level, what they accept, and their
#: capabilities from a float32 and a quant8 figure.
_SAMPLES: tuple[
    tuple[str, DeviceType, int, OperationFilter, Callable[[PerformanceInfo, PerformanceInfo], Capabilities]],
    ...,
] = (
    ("sample-all", DeviceType.CPU, FEATURE_LEVEL, _any_operation,
     lambda f, q: _capabilities(f, {QUANTIZED_CODES: q}, f)),
    ("sample-float-fast", DeviceType.GPU, FEATURE_LEVEL, _float_operation,
     lambda f, q: _capabilities(UNSUPPORTED, {_FLOAT_CODES: f}, f)),
    ("sample-quant", DeviceType.ACCELERATOR, FEATURE_LEVEL, _quant_operation,
     lambda f, q: _capabilities(UNSUPPORTED, {QUANTIZED_CODES: q}, q)),
    ("sample-minimal", DeviceType.ACCELERATOR, 27, _minimal_operation,
     lambda f, q: _capabilities(f, {QUANTIZED_CODES: q}, UNSUPPORTED)),
)  # fmt: skip


def sample_devices(
    emulated: Mapping[str, PerformanceInfo] | None = None,
    measured: tuple[PerformanceInfo, PerformanceInfo] | None = None,
) -> list[SampleDevice]:
    """The default service's devices, in the spirit of Android's sample drivers.

    They differ in what they accept, not in speed: all run the reference
    kernels, so each declares the ratio measured at start-up for the operand
    types it accepts and ``UNSUPPORTED`` for the others.  ``emulated`` (from
    ``nnburst serve --emulate-performance``) replaces a device's measured
    figures, to try partitioning as if it were an accelerator."""
    emulated = dict(emulated or {})
    names = [f"{VENDOR}-{sample[0]}" for sample in _SAMPLES]
    unknown = sorted(set(emulated) - set(names))
    if unknown:
        raise BadDataError(
            f"no sample device named {', '.join(unknown)} (devices: {', '.join(names)})"
        )
    floats, quants = measured or measure_figures()
    devices = []
    for (name, device_type, level, accepts, capabilities), full_name in zip(_SAMPLES, names):
        declared = emulated.get(full_name)
        figures = (floats, quants) if declared is None else (declared, declared)
        devices.append(SampleDevice(name, device_type, level, capabilities(*figures), accepts))
    return devices


# -- one client --------------------------------------------------------------------------


class ClientSession:
    """One app's connection: its prepared models, its bursts, its lifetime."""

    def __init__(self, service: Service, sock: socket.socket) -> None:
        self._service = service
        self._models: dict[int, SamplePreparedModel] = {}
        self._model_bytes: dict[int, int] = {}  # each model's estimated cost (model_cost)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._open = True
        self._sock = sock
        self._hangup_poll = select.poll()
        self._hangup_poll.register(sock, select.POLLRDHUP)
        limits = service.limits
        self._long_executions = LongExecutions(limits.long_executions)
        self.bursts = BurstHost(
            self._lookup,
            max_channel=self._max_channel,
            memories=MappingBudget(limits.connection_memories, service.mappings),
        )
        handlers = {
            Kind.GET_DEVICES: self._get_devices,
            Kind.GET_CAPABILITIES: self._get_capabilities,
            Kind.GET_SUPPORTED_OPERATIONS: self._get_supported_operations,
            Kind.PREPARE_MODEL: self._prepare_model,
            Kind.EXECUTE: self._execute,
            Kind.RELEASE_MODEL: self._release_model,
            **self.bursts.handlers(),
        }
        self.connection = Connection(
            sock,
            handlers,
            on_close=self._closed,
            name="nnburst-service-client",
            start=False,
            max_payload=service.limits.frame_bytes,
            budget=service.receiving,
        )
        self.bursts.connection = self.connection  # before the first request can arrive
        self.connection.start()
        if self.connection.broken:  # the peer left before we got here: _closed could not close it
            self.connection.close()

    def alive(self) -> bool:
        """False once the app is gone, noticed even while the reader thread is busy
        running the app's synchronous execution (the socket says it hung up)."""
        if not self._open or self._service.stopping:
            return False
        try:
            return not self._hangup_poll.poll(0)
        except (OSError, ValueError):  # the socket is closed
            return False

    def _max_channel(self, model: IPreparedModel) -> int:
        """The longest burst channel (datums) this connection may give ``model``."""
        limits = self._service.limits
        if limits.burst_channel:
            return limits.burst_channel
        if not isinstance(model, SamplePreparedModel):
            return CHANNEL_LENGTH
        return max(CHANNEL_LENGTH, request_datums(model.model.model, limits.cached_memories))

    @property
    def model_count(self) -> int:
        return len(self._models)

    def idle_since(self) -> float | None:
        """When the app last sent anything, if it holds nothing here (no prepared
        model, no burst); None while it holds something, which it may use any time."""
        if self._models or self.bursts.burst_count:
            return None
        return self.connection.last_heard

    def _lookup(self, model_id: int) -> IPreparedModel | None:
        with self._lock:
            return self._models.get(model_id)

    def _device(self, index: int) -> SampleDevice:
        devices = self._service.devices
        if index >= len(devices):
            raise BadDataError(f"no device {index} ({len(devices)} devices)")
        return devices[index]

    def _get_devices(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        frame.close_fds()
        infos = [
            protocol.DeviceInfo(d.name, int(d.type), d.version_string, d.feature_level)
            for d in self._service.devices
        ]
        return protocol.encode_devices(infos), ()

    def _get_capabilities(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        frame.close_fds()
        device = self._device(protocol.decode_u32(frame.payload))
        fault_hook.apply("capabilities", self.alive)
        return protocol.encode_capabilities(device.capabilities), ()

    def _get_supported_operations(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        frame.close_fds()
        index, model = protocol.decode_device_model(frame.payload)
        device = self._device(index)
        fault_hook.apply("supported", self.alive)
        return protocol.encode_flags(device.get_supported_operations(model)), ()

    def _prepare_model(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        frame.close_fds()
        index, preference, priority, deadline, model = protocol.decode_prepare(frame.payload)
        device = self._device(index)
        preference_code = protocol.decode_enum(PreferenceCode, preference, "preference")
        priority_code = protocol.decode_enum(PriorityCode, priority, "priority")
        cost = model_cost(model, len(frame.payload))
        self._check_room(cost)
        prepared = device.prepare_model(
            model, preference_code, priority_code, deadline, alive=self.alive
        )
        prepared.max_cached_memories = self._service.limits.cached_memories
        prepared.long_executions = self._long_executions
        with self._lock:
            if not self._open:
                raise NNError("the connection is closing", ResultCode.UNAVAILABLE_DEVICE)
            self._check_room(cost)  # again: another PREPARE may have raced
            model_id = next(self._ids)
            self._models[model_id] = prepared
            self._model_bytes[model_id] = cost
        return protocol.encode_u32(model_id), ()

    def _release_model(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        frame.close_fds()
        model_id = protocol.decode_u32(frame.payload)
        with self._lock:
            self._models.pop(model_id, None)
            self._model_bytes.pop(model_id, None)
        return b"", ()

    def _check_room(self, size: int) -> None:
        """Refuse a model past this connection's share (count or bytes) of the service."""
        limits = self._service.limits
        if len(self._models) >= limits.models:
            raise NNError(
                f"this connection holds {limits.models} prepared models, the limit: release some first",
                ResultCode.OUT_OF_MEMORY,
            )
        held = sum(self._model_bytes.values())
        if held + size > limits.model_bytes:
            raise NNError(
                f"this connection's prepared models would take {held + size} bytes (this one "
                f"{size}, as prepared: its constants and its operands and operations), over "
                f"its {limits.model_bytes}-byte limit (nnburst serve --max-model-bytes): "
                "release some first",
                ResultCode.OUT_OF_MEMORY,
            )

    def _execute(self, frame: Frame) -> tuple[bytes, Sequence[int]]:
        fds, frame.fds = frame.fds, []
        pools: list[MappedMemory] = []
        try:
            call = protocol.decode_execute(frame.payload, len(fds))
            prepared = self._lookup(call.model_id)
            if prepared is None:
                raise BadDataError(f"no prepared model {call.model_id}")
            while fds:
                offset, size = call.regions[len(pools)]
                # MappedMemory takes the fd, refuses it unless sealed against
                # shrinking (a shrunk file faults on access) and checks the region.
                pools.append(MappedMemory(fds.pop(0), size, offset, require_sealed=True))
                drop_fd(pools[-1])  # one fd a pool, the mapping's own
            status, shapes, timing = prepared.execute_synchronously(
                Request(call.inputs, call.outputs, list(pools)),
                MeasureTiming(call.measure),
                deadline_ns=call.deadline_ns,
                loop_timeout_ns=call.loop_timeout_ns,
            )
        except NNError as exc:
            status, shapes, timing = status_for_exception(exc), [], NO_TIMING
        finally:
            for fd in fds:
                os.close(fd)
            for pool in pools:
                pool.close()
        return protocol.encode_result(status, shapes, timing), ()

    def _closed(self) -> None:
        """The app went away (or the service stops): release everything it held."""
        with self._lock:
            self._open = False
            self._models.clear()
            self._model_bytes.clear()
        self.bursts.close()
        self._service.forget(self)
        connection = getattr(self, "connection", None)  # None if the peer left during __init__
        if connection is not None:
            connection.close()

    def close(self) -> None:
        self.connection.close()


# -- the service -------------------------------------------------------------------------


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


#: Prepared models one connection may hold at once (each holds its constants).
MAX_MODELS_PER_CONNECTION = 64
#: Bytes prepared models may take per connection, as :func:`model_cost` estimates them.
MAX_MODEL_BYTES_PER_CONNECTION = 512 * 1024 * 1024
#: What one operand and one operation of a prepared model cost in memory beyond their
#: wire bytes (decoded and prepared: Python objects, the plan; tracemalloc on CPython
#: 3.11: ~310 bytes an operand, ~1,900 an operation with its output, 35-40x their wire size).
OPERAND_COST = 320
OPERATION_COST = 2048
#: Executions of models with WHILE loops one connection may run at once.
MAX_LONG_EXECUTIONS_PER_CONNECTION = 2
#: Bytes of messages being received at once by one process, across its connections.
MAX_RECEIVING_BYTES = 4 * MAX_PAYLOAD
#: File descriptors a process keeps for itself (connections, queues, a sync
#: execution's pools) out of its limit when it budgets cached memories.
FD_RESERVE = 256
#: Connections served at once (each holds a thread and a socket); more are closed at once.
MAX_CONNECTIONS = 256
#: How long accepting pauses when the process is out of fds or memory.
ACCEPT_BACKOFF_S = 0.1
#: Seconds a connection holding no model and no burst may stay silent before it is closed
#: (a client reconnects by itself when it needs the service again).
IDLE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Limits:
    """What clients may take from one service process; each is a ``nnburst serve`` option."""

    connections: int = MAX_CONNECTIONS
    models: int = MAX_MODELS_PER_CONNECTION  # prepared models per connection
    model_bytes: int = MAX_MODEL_BYTES_PER_CONNECTION  # per connection
    frame_bytes: int = MAX_PAYLOAD  # one message from a client
    cached_memories: int = MAX_CACHED_SLOTS  # memories one burst may keep mapped
    idle_timeout: float = IDLE_TIMEOUT_S  # a connection holding nothing, silent
    receiving_bytes: int = MAX_RECEIVING_BYTES  # messages being received, all connections
    #: memories all bursts of one connection may keep mapped (one fd each); 0: from the fd limit
    connection_memories: int = 0
    #: the longest burst channel, in datums; 0: room for the model's largest request
    burst_channel: int = 0
    long_executions: int = MAX_LONG_EXECUTIONS_PER_CONNECTION  # WHILE models, per connection

    def __post_init__(self) -> None:
        if not self.connection_memories:
            object.__setattr__(self, "connection_memories", default_connection_memories())


def open_file_limit() -> int:
    """This process's soft limit on open files (RLIMIT_NOFILE)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def mapping_limit() -> int:
    """Memories all connections of this process may keep mapped: its fd limit
    less :data:`FD_RESERVE` (each mapping holds one fd)."""
    return max(16, open_file_limit() - FD_RESERVE)


def default_connection_memories() -> int:
    """A connection's share of :func:`mapping_limit`: a quarter, so one client
    cannot take the fds every other client's connection and queues need."""
    return max(16, mapping_limit() // 4)


def model_cost(model: HalModel, wire_bytes: int) -> int:
    """What a prepared model costs the service: its wire bytes (the constants)
    and the objects each operand and operation becomes (35-40x their wire size)."""
    subgraphs = model.subgraphs()
    operands = sum(len(subgraph.operands) for subgraph in subgraphs)
    operations = sum(len(subgraph.operations) for subgraph in subgraphs)
    return wire_bytes + operands * OPERAND_COST + operations * OPERATION_COST


def request_datums(model: HalModel, pools: int) -> int:
    """Datums of the longest request packet for ``model`` naming ``pools`` memories:
    packet information, each input and output with its dimensions (an operand
    of unknown rank at the wire's limit), the pools and the timing datum."""
    main = model.main
    arguments = 0
    for index in (*main.input_indexes, *main.output_indexes):
        dims = main.operands[index].info.dimensions
        arguments += 1 + (len(dims) if dims else protocol.MAX_RANK)
    return 2 + arguments + pools


def peer_allowed(uid: int, allowed_uid: int) -> bool:
    """Only the service's own user (or one explicitly named) may connect."""
    return uid == allowed_uid


def _prepare_directory(path: str) -> None:
    """Create the socket's directory 0700, or check that an existing one is a real
    directory of ours that no other user may write.

    Never follows a link there: another user may plant one at a predictable
    path (``/tmp/nnburst-<uid>``) to make us chmod, or bind inside, a
    directory of their choosing.  Only a directory we created is chmodded; an
    existing one others may write (0777) is refused, not chmodded: another
    user could replace our socket there with theirs, and the mode is the
    owner's choice to change.  Links *above* it are followed (``/var/run`` is
    one on most systems), but only where no other user could have put them:
    see :func:`_check_ancestors`."""
    directory = os.path.dirname(os.path.abspath(path))
    _check_ancestors(os.path.dirname(directory))
    try:
        os.mkdir(directory, 0o700)  # not makedirs: a missing parent is the user's to make
        created = True
    except FileExistsError:
        created = False
    except FileNotFoundError:
        raise NNError(
            f"{os.path.dirname(directory)} does not exist; create it or choose another "
            "--socket PATH",
            ResultCode.BAD_STATE,
        ) from None
    info = os.lstat(directory)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise NNError(
            f"{directory} is not a directory (a symbolic link or a file); remove it or "
            "choose another --socket PATH",
            ResultCode.BAD_STATE,
        )
    if info.st_uid != os.getuid():
        raise NNError(
            f"{directory} belongs to another user; choose a directory you own with --socket PATH",
            ResultCode.BAD_STATE,
        )
    if created and stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(directory, 0o700, follow_symlinks=False)
    elif not created and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise NNError(
            f"{directory} may be written by other users (mode {stat.S_IMODE(info.st_mode):o}): "
            "one could replace the socket with theirs; chmod go-w it or choose another "
            "--socket PATH",
            ResultCode.BAD_STATE,
        )


def _overflow_uid() -> int:
    """The uid files of unmapped owners show in a user namespace (``nobody``)."""
    try:
        with open("/proc/sys/kernel/overflowuid") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65534


def _check_ancestors(directory: str) -> None:
    """Refuse a path another user could redirect: every directory from the root
    to ``directory``, and every symbolic link met on the way, must belong to us
    or root, and a directory others may write must be sticky (as ``/tmp`` is, so
    nobody else can rename or replace what we own in it).  The overflow uid
    counts as root: in a user namespace it stands for the host's root, whom
    nobody inside can act as."""
    trusted = {0, os.getuid(), _overflow_uid()}
    pending = [part for part in os.path.abspath(directory).split(os.sep) if part]
    current = os.sep
    hops = 0
    while True:
        info = os.stat(current)  # a directory: links were resolved on the way
        if info.st_uid not in trusted or (
            info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX
        ):
            raise NNError(
                f"{current}, above the socket's directory, may be changed by another user "
                "(it belongs to another user, or others may write it and it is not sticky); "
                "choose another --socket PATH",
                ResultCode.BAD_STATE,
            )
        if not pending:
            return
        part = pending.pop(0)
        candidate = os.path.join(current, part)
        try:
            link = os.lstat(candidate)
        except OSError:
            return  # missing, or not a directory: _prepare_directory and bind report it
        if stat.S_ISLNK(link.st_mode):
            hops += 1
            if link.st_uid not in trusted or hops > 40:
                raise NNError(
                    f"{candidate}, above the socket's directory, is a symbolic link another "
                    "user made (or a loop of them); choose another --socket PATH",
                    ResultCode.BAD_STATE,
                )
            target = os.readlink(candidate)
            pending = [p for p in target.split(os.sep) if p] + pending
            if os.path.isabs(target):
                current = os.sep
            continue
        current = os.path.normpath(candidate)  # lexical "..": current holds no links


def _remove_stale(path: str) -> None:
    """Unlink a socket left by a dead service; refuse to replace a live one."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise NNError(
            f"{path} exists and is not a socket; remove it or choose another --socket PATH",
            ResultCode.BAD_STATE,
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)
        return
    finally:
        probe.close()
    raise NNError(
        f"a service is already listening on {path}; stop it first or choose another --socket PATH",
        ResultCode.BAD_STATE,
    )


def listen(path: str) -> socket.socket:
    """The service's listening socket at ``path``: private (0600, in a 0700
    directory of ours), replacing only a dead service's socket."""
    _prepare_directory(path)
    _remove_stale(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old_umask = os.umask(0o177)
        try:
            listener.bind(path)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        # Room for a burst of connects: a full backlog makes connect() fail at once.
        listener.listen(socket.SOMAXCONN)
    except BaseException:
        listener.close()
        raise
    return listener


def unlink_socket(path: str) -> None:
    """Remove the service's socket (only a socket: never what replaced it)."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


class Service:
    """Listens on a Unix socket and serves every accepted (same-uid) client."""

    def __init__(
        self,
        path: str,
        devices: Sequence[SampleDevice] | None = None,
        allowed_uid: int | None = None,
        limits: Limits | None = None,
        listener: socket.socket | None = None,
    ) -> None:
        """``listener``: accept from this socket (a worker's, bound by its supervisor,
        which owns the path) instead of binding ``path``."""
        self.path = path
        self.limits = limits or Limits()
        self.devices = list(devices if devices is not None else sample_devices())
        self.allowed_uid = os.getuid() if allowed_uid is None else allowed_uid
        self.stopping = False
        #: bytes being received from clients, shared by every connection
        self.receiving = ReceiveBudget(self.limits.receiving_bytes)
        #: memories (one fd each) every burst of every connection keeps mapped
        self.mappings = MappingBudget(mapping_limit())
        # A plain flag, not an Event: stop() runs in signal handlers, which may
        # interrupt the main thread (or another handler) inside Event's lock.
        self._stop_requested = False
        self._sessions: set[ClientSession] = set()
        self._lock = threading.Lock()
        self._owns_path = listener is None
        self._listener = listen(path) if listener is None else listener
        self._listener.settimeout(0.2)  # how often the accept loop looks at the stop flag

    def stop(self) -> None:
        """Ask the accept loop to end (safe from a signal handler: it takes no lock)."""
        self._stop_requested = True

    def forget(self, session: ClientSession) -> None:
        with self._lock:
            self._sessions.discard(session)

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    def serve_forever(self) -> None:
        """Accept clients until :meth:`stop`.  Running out of fds or memory is
        a reason to wait, never to stop serving the clients already here."""
        try:
            while not self._stop_requested:
                self._close_idle()
                try:
                    sock, _ = self._listener.accept()
                except TimeoutError:
                    continue
                except OSError as exc:
                    if exc.errno in (errno.EINTR, errno.ECONNABORTED):
                        continue
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        log.warning("cannot accept a client (%s): retrying shortly", exc.strerror)
                        time.sleep(ACCEPT_BACKOFF_S)
                        continue
                    raise
                self._accept(sock)
        finally:
            self.close()

    def _close_idle(self) -> None:
        """Close connections that hold nothing and stayed silent too long: an idle
        client must not keep one of the service's connections (and fds) forever."""
        limit = time.monotonic() - self.limits.idle_timeout
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            since = session.idle_since()
            if since is not None and since < limit:
                log.info("closed a connection idle for %.0f s", time.monotonic() - since)
                session.close()

    def _accept(self, sock: socket.socket) -> None:
        if self.session_count >= self.limits.connections:
            log.warning("refused a client: %d connections is the limit", self.limits.connections)
            sock.close()
            return
        sock.setblocking(True)
        try:
            uid = peer_uid(sock)
        except OSError:
            sock.close()
            return
        if not peer_allowed(uid, self.allowed_uid):
            log.warning("refused a client with uid %d", uid)
            sock.close()
            return
        session = ClientSession(self, sock)
        with self._lock:
            self._sessions.add(session)
        if session.connection.broken:  # it went away before it was added: forget it here
            self.forget(session)

    def close(self) -> None:
        """Unlink the socket, end every connection (their models and bursts go too)."""
        self.stopping = True
        self._stop_requested = True
        if self._owns_path:
            unlink_socket(self.path)
        self._listener.close()
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            session.close()
