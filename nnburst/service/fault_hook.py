"""A test hook: faults the service tests switch on in a service process they start.

A test starts ``nnburst serve`` with ``NNBURST_SERVICE_FAULT="call:action[,...]"``
in the child's environment; every other child of nnburst has the variable
removed (``launch.child_env``), so no user-facing option or protocol message
reaches this.  ``call`` is one of ``prepare execute supported capabilities``
(``execute`` faults also apply to burst executions); ``action`` is ``fail``
(the call fails), ``hang`` (blocks until the client goes), ``sleep=SECONDS``
or ``exit`` (the process dies at once).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from ..codes import ResultCode
from ..errors import NNError

ENV_VAR = "NNBURST_SERVICE_FAULT"


def _configured() -> dict[str, str]:
    spec = os.environ.get(ENV_VAR, "")
    return dict(item.split(":", 1) for item in spec.split(",") if ":" in item)


#: Whether any fault is configured at all (read once: the hot path skips the hook).
ARMED = bool(_configured())


def apply(call: str, alive: Callable[[], bool] = lambda: True) -> None:
    """Apply the configured fault for ``call``, if any (see the module docstring)."""
    action = _configured().get(call)
    if action is None:
        return
    if action == "fail":
        raise NNError(f"injected failure in {call}", ResultCode.OP_FAILED)
    if action == "exit":
        os._exit(3)
    if action == "hang":
        end = time.monotonic() + 60  # bounded even so
        while alive() and time.monotonic() < end:
            time.sleep(0.05)
        return
    if action.startswith("sleep="):
        time.sleep(float(action[6:]))
