"""Device discovery: the runtime's view of the drivers it can compile for.

Devices come from *sources*: functions returning the HAL devices they know.
The in-process CPU reference driver is the first source and the only driver
this module knows by name (it is the runtime's fallback).  Driver services
are a source like any other: ``nnburst/__init__.py`` registers
:func:`nnburst.service.remote.discover`, so the runtime never imports the
service modules; tests add fake drivers the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .codes import DeviceTypeCode, ResultCode
from .cpu.driver import cpu_device
from .errors import BadDataError, NNError
from .hal.interfaces import IDevice

__all__ = ["Device", "device_for", "get_device", "get_devices", "register_source"]


def _cpu_source() -> list[IDevice]:
    return [cpu_device()]


#: Functions listing the HAL devices they provide, in preference order.
_SOURCES: list[Callable[[], list[IDevice]]] = [_cpu_source]

_wrappers: dict[int, Device] = {}
_wrappers_lock = threading.Lock()


class Device:
    """One device as the app sees it (``ANeuralNetworksDevice``); wraps a HAL ``IDevice``."""

    def __init__(self, hal: IDevice) -> None:
        self._hal = hal

    @property
    def hal(self) -> IDevice:
        """The HAL device behind this one (in-process driver or service proxy)."""
        return self._hal

    @property
    def name(self) -> str:
        """``{VENDOR}-{DEVICE_NAME}``, e.g. ``nnburst-reference``."""
        return self._hal.name

    @property
    def type(self) -> DeviceTypeCode:
        return DeviceTypeCode(int(self._hal.type))

    @property
    def version(self) -> str:
        """The driver's version string; it changes with every driver release."""
        return self._hal.version_string

    @property
    def feature_level(self) -> int:
        return self._hal.feature_level

    def wait(self) -> None:
        """Check the device is live (``ANeuralNetworksDevice_wait``).

        An in-process device always is; a service device is live while its
        service answers.  Its devices come back as new ``Device`` objects
        when a restarted service is discovered again.

        Raises:
            NNError: ``UNAVAILABLE_DEVICE`` when the device's service is gone.
        """
        if not self.hal.available:
            raise NNError(f"{self.name}: its driver service is gone", ResultCode.UNAVAILABLE_DEVICE)

    def __repr__(self) -> str:
        return f"<Device {self.name} {self.type.name} {self.version!r} feature level {self.feature_level}>"


def device_for(hal: IDevice) -> Device:
    """The one :class:`Device` for ``hal``, so devices compare equal (by identity) across calls."""
    with _wrappers_lock:
        device = _wrappers.get(id(hal))
        if device is None or device.hal is not hal:
            device = _wrappers[id(hal)] = Device(hal)
        return device


def get_devices() -> list[Device]:
    """Every device available now (``ANeuralNetworks_getDeviceCount`` + ``getDevice``)."""
    return [device_for(hal) for source in _SOURCES for hal in source()]


def get_device(name: str) -> Device:
    """The available device called ``name`` (as ``nnburst devices`` lists it).

    Raises:
        BadDataError: no device has that name; the message lists the names that exist.
    """
    devices = get_devices()
    for device in devices:
        if device.name == name:
            return device
    names = ", ".join(d.name for d in devices)
    raise BadDataError(f"get_device: no device named {name!r}; the devices are: {names}")


def register_source(source: Callable[[], list[IDevice]]) -> Callable[[], None]:
    """Add a device source after the existing ones; returns a function that removes it.

    The package registers the driver-service source this way, and tests make
    in-process fake drivers visible to ``get_devices()`` (and so to
    ``Compilation(model)``) without a service.
    """
    _SOURCES.append(source)

    def unregister() -> None:
        if source in _SOURCES:
            _SOURCES.remove(source)

    return unregister
