"""A device in another process: start a driver service, compile for one of its devices, burst.

Android runs each NNAPI driver in its own process. ``nnburst serve`` is that
process: it offers sample devices (``nnburst-sample-all``,
``nnburst-sample-float-fast``, ...) over a Unix socket, and the runtime finds
them through ``NNBURST_SERVICES`` (socket paths joined by ``:``). This
example starts the service itself, exactly as ``nnburst serve --socket PATH``
would, waits for its ``listening on PATH`` line, compiles a model for
``nnburst-sample-all`` *explicitly* (``Compilation(model, devices=[...])``:
the partitioner does not choose), then runs the same reusable execution
through ``compute()`` (one socket round trip per call) and through a burst
(two FMQs shared with the service process), and stops the service with
SIGTERM, which closes its connections and removes the socket.

Run it (after ``pip install .``)::

    python examples/service_device.py

To try it against a service you run yourself, start ``nnburst serve --socket
/tmp/nn.sock`` in another terminal and set ``NNBURST_SERVICES=/tmp/nn.sock``
for your own program; this script always starts its own.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import nnburst as nn

DEVICE = "nnburst-sample-all"
COMPUTATIONS = 200
START_TIMEOUT_S = 30.0


def add_model(shape: tuple[int, ...]) -> nn.Model:
    """A finished model with two inputs and one output: ``a + b``."""
    tensor = nn.OperandType(nn.OperandCode.TENSOR_FLOAT32, shape)
    model = nn.Model()
    a, b, out = model.add_operand(tensor), model.add_operand(tensor), model.add_operand(tensor)
    fuse = model.add_operand(nn.OperandType(nn.OperandCode.INT32))
    model.set_operand_value(fuse, np.int32(nn.FuseCode.NONE))
    model.add_operation(nn.OperationCode.ADD, [a, b, fuse], [out])
    model.identify_inputs_and_outputs([a, b], [out])
    model.finish()
    return model


def start_service(socket_path: Path) -> subprocess.Popen[str]:
    """``nnburst serve --socket PATH`` as a child; returns once it is listening.

    ``-P`` keeps the current folder off the child's import path, so a source
    checkout in the working directory cannot shadow the installed package.
    """
    service = subprocess.Popen(
        [sys.executable, "-P", "-m", "nnburst", "serve", "--socket", str(socket_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert service.stdout is not None and service.stderr is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([service.stdout], [], [], 0.5)
        if ready:
            line = service.stdout.readline()
            if line.startswith("listening on"):
                return service
            if not line:  # EOF: the service exited
                break
    service.kill()
    error = service.stderr.read().strip()
    service.wait()
    service.stdout.close()
    service.stderr.close()
    raise RuntimeError(f"the driver service did not start: {error or 'no output'}")


def stop_service(service: subprocess.Popen[str]) -> int:
    """SIGTERM, as Ctrl-C on ``nnburst serve``: the service closes every connection and exits."""
    service.send_signal(signal.SIGTERM)
    try:
        code = service.wait(timeout=10)
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()
        assert service.stdout is not None and service.stderr is not None
        service.stdout.close()
        service.stderr.close()
    return code


def median_us(samples: list[int]) -> float:
    return float(np.median(samples)) / 1000


def run_on_service_device() -> None:
    device = next((d for d in nn.get_devices() if d.name == DEVICE), None)
    if device is None:
        names = ", ".join(d.name for d in nn.get_devices())
        raise RuntimeError(f"no device {DEVICE!r} found; the runtime sees: {names}")
    print(f"device: {device.name} ({device.type.name}, {device.version})")

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((3, 4), np.float32)
    result = np.empty((3, 4), np.float32)
    with nn.Compilation(add_model(a.shape), devices=[device]) as compilation:
        compilation.set_preference(nn.PreferenceCode.SUSTAINED_SPEED)
        compilation.finish()
        execution = nn.Execution(compilation)
        execution.set_reusable(True)
        execution.set_input(0, a)
        execution.set_input(1, b)
        execution.set_output(0, result)

        sync_ns: list[int] = []
        for _ in range(COMPUTATIONS):
            start = time.perf_counter_ns()
            execution.compute()
            sync_ns.append(time.perf_counter_ns() - start)
        assert np.array_equal(result, a + b), result

        result[...] = 0
        burst_ns: list[int] = []
        with nn.Burst(compilation) as burst:
            for _ in range(COMPUTATIONS):
                start = time.perf_counter_ns()
                execution.burst_compute(burst)
                burst_ns.append(time.perf_counter_ns() - start)
        assert np.array_equal(result, a + b), result

    print(f"result:\n{result}")
    print(f"{COMPUTATIONS} computations each way in the service process; median per computation:")
    print(f"  compute (socket):     {median_us(sync_ns):8.1f} µs")
    print(f"  burst_compute (FMQ):  {median_us(burst_ns):8.1f} µs")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="nnburst-example-") as folder:
        socket_path = Path(folder) / "driver.sock"
        service = start_service(socket_path)
        print(f"service started (pid {service.pid}) on {socket_path}")
        os.environ["NNBURST_SERVICES"] = str(socket_path)  # read by every nn.get_devices()
        try:
            run_on_service_device()
        finally:
            code = stop_service(service)
        print(f"service stopped (exit code {code}); socket removed: {not socket_path.exists()}")
        if code != 0:
            print("the service did not exit cleanly", file=sys.stderr)
            return 1
    print("service device: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
