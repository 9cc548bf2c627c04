"""nnburst: Android's Neural Networks API (NNAPI) and its burst-execution path for Python.

The names below are the NDK-style runtime (``import nnburst as nn``; see
``docs/api.md`` §1).  The Fast Message Queue lives in :mod:`nnburst.fmq` and
the HAL layer in :mod:`nnburst.hal`; import those subpackages directly.

This module is also the one place that wires the layers together: it
registers the driver services as a device source, so the runtime lists
service devices without importing any service module (docs/architecture.md,
"Import rules").
"""

from . import devices as _devices
from . import log as _log  # noqa: F401  (applies NNBURST_VLOG at import)
from ._version import __version__ as __version__
from .burst import Burst as Burst
from .codes import DeviceTypeCode as DeviceTypeCode
from .codes import DurationCode as DurationCode
from .codes import FuseCode as FuseCode
from .codes import OperandCode as OperandCode
from .codes import OperationCode as OperationCode
from .codes import PaddingCode as PaddingCode
from .codes import PreferenceCode as PreferenceCode
from .codes import PriorityCode as PriorityCode
from .codes import ResultCode as ResultCode
from .compilation import Compilation as Compilation
from .devices import Device as Device
from .devices import get_device as get_device
from .devices import get_devices as get_devices
from .errors import NNError as NNError
from .execution import Event as Event
from .execution import Execution as Execution
from .execution import get_default_loop_timeout as get_default_loop_timeout
from .execution import get_maximum_loop_timeout as get_maximum_loop_timeout
from .memory import Memory as Memory
from .memory import MemoryDesc as MemoryDesc
from .model import Model as Model
from .operands import OperandType as OperandType
from .service.remote import discover as _discover_services

_devices.register_source(_discover_services)

__all__ = [
    "Burst",
    "Compilation",
    "Device",
    "DeviceTypeCode",
    "DurationCode",
    "Event",
    "Execution",
    "FuseCode",
    "Memory",
    "MemoryDesc",
    "Model",
    "NNError",
    "OperandCode",
    "OperandType",
    "OperationCode",
    "PaddingCode",
    "PreferenceCode",
    "PriorityCode",
    "ResultCode",
    "get_default_loop_timeout",
    "get_device",
    "get_devices",
    "get_maximum_loop_timeout",
]
