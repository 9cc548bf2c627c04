"""HAL layer (api.md §3): model, request and packet types, driver interfaces,
and the burst server and controller.

Everything here is below the NDK-style runtime: drivers implement these
interfaces, and the runtime talks to in-process and remote drivers through
them alone.  ``MappedMemory`` is the shared mapping behind a memory pool;
``nnburst.Memory`` is one.
"""

from ..codes import ErrorStatus as ErrorStatus
from .burst_controller import BurstSlots as BurstSlots
from .burst_controller import ExecutionBurstController as ExecutionBurstController
from .burst_server import DefaultBurstExecutorWithCache as DefaultBurstExecutorWithCache
from .burst_server import ExecutionBurstServer as ExecutionBurstServer
from .interfaces import IBurstCallback as IBurstCallback
from .interfaces import IBurstContext as IBurstContext
from .interfaces import IBurstExecutorWithCache as IBurstExecutorWithCache
from .interfaces import IDevice as IDevice
from .interfaces import IPreparedModel as IPreparedModel
from .memory import MappedMemory as MappedMemory
from .model import HalModel as HalModel
from .model import Lifetime as Lifetime
from .model import Operand as Operand
from .model import Operation as Operation
from .model import Subgraph as Subgraph
from .packets import REQUEST_DATUM as REQUEST_DATUM
from .packets import RESULT_DATUM as RESULT_DATUM
from .packets import deserialize_request as deserialize_request
from .packets import deserialize_result as deserialize_result
from .packets import serialize_request as serialize_request
from .packets import serialize_result as serialize_result
from .types import NO_TIMING_US as NO_TIMING_US
from .types import Capabilities as Capabilities
from .types import DataLocation as DataLocation
from .types import DeviceType as DeviceType
from .types import MeasureTiming as MeasureTiming
from .types import OutputShape as OutputShape
from .types import PerformanceInfo as PerformanceInfo
from .types import Request as Request
from .types import RequestArgument as RequestArgument
from .types import Timing as Timing

__all__ = [
    "NO_TIMING_US",
    "REQUEST_DATUM",
    "RESULT_DATUM",
    "BurstSlots",
    "Capabilities",
    "DataLocation",
    "DefaultBurstExecutorWithCache",
    "DeviceType",
    "ErrorStatus",
    "ExecutionBurstController",
    "ExecutionBurstServer",
    "HalModel",
    "IBurstCallback",
    "IBurstContext",
    "IBurstExecutorWithCache",
    "IDevice",
    "IPreparedModel",
    "Lifetime",
    "MappedMemory",
    "MeasureTiming",
    "Operand",
    "Operation",
    "OutputShape",
    "PerformanceInfo",
    "Request",
    "RequestArgument",
    "Subgraph",
    "Timing",
    "deserialize_request",
    "deserialize_result",
    "serialize_request",
    "serialize_result",
]
