"""An app process for the driver-service tests (``python -m tests.service_peer``).

``burst_forever PATH``: connect to the service at PATH, open a burst on
``nnburst-sample-all`` and compute until killed (the test SIGKILLs it
mid-burst and checks that the service stays healthy).
"""

from __future__ import annotations

import sys

from nnburst.hal.burst_controller import ExecutionBurstController
from nnburst.hal.types import MeasureTiming
from nnburst.service.remote import ServiceClient

from .burst_models import Pools, add_model


def burst_forever(path: str) -> None:
    client = ServiceClient(path)
    device = next(d for d in client.devices() if d.name == "nnburst-sample-all")
    prepared = device.prepare_model(add_model())
    pools = Pools()
    controller = ExecutionBurstController.create(prepared)
    announced = False
    while True:
        status, _, _, _ = controller.compute(pools.request(), MeasureTiming.NO, pools.keys)
        assert status == 0, status
        if not announced:
            print("bursting", flush=True)
            announced = True


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    globals()[name](*args)
