"""One registration per operation: validate, prepare, execute.

Modelled on NNAPI's ``OperationResolver``: every operation module in
``nnburst/cpu/ops/`` registers itself with :func:`register`, and the executor
looks operations up by code.  Modules are discovered, not listed, so adding an
operation never means editing a shared table.

Contract for an operation:

* ``validate(sig)`` checks operand counts, types, ranks and constant
  parameters and raises :class:`~nnburst.errors.BadDataError` with a message
  naming the operation and the operand.  It must not assume inputs that are
  not constants have values.
* ``prepare(sig)`` (optional) returns per-operation state computed once per
  prepared model from constant inputs (e.g. converted weights).
* ``execute(ctx)`` returns the output arrays, one per output operand, with the
  output operand's dtype.  Output shapes are decided here; the executor checks
  them against what the model declared.
* ``bind(sig, state)`` (optional) is the fast path for the hot operations: it
  returns a :data:`Kernel`, a function of the input arrays alone with every
  constant parameter (activation, strides, multipliers) already resolved, or
  ``None`` when it cannot (e.g. a parameter is not a constant); the executor
  then calls ``execute``.  A kernel must behave exactly as ``execute``, be
  safe to call from several threads, and keep no per-run state.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..codes import OperationCode, ResultCode
from ..errors import BadDataError, NNError
from ..operands import OperandInfo
from . import ops


@dataclass
class OperationSignature:
    """An operation as it appears in a model, before any execution."""

    code: OperationCode
    inputs: list[OperandInfo]
    outputs: list[OperandInfo]
    #: input position -> constant value (``None`` for an omitted optional
    #: input). Positions of non-constant inputs are absent.
    constants: dict[int, np.ndarray | None] = field(default_factory=dict)
    relaxed: bool = False
    #: input position -> index into ``HalModel.referenced`` for MODEL inputs
    #: (IF/WHILE branches and bodies), which are not constants.
    subgraphs: dict[int, int] = field(default_factory=dict)
    #: the whole ``HalModel``, so control flow can check what it references.
    model: Any = None

    def fail(self, message: str) -> BadDataError:
        """A BAD_DATA error naming this operation; ``raise sig.fail(...)``."""
        return BadDataError(f"{self.code.name}: {message}")


@dataclass
class ExecutionContext:
    """One execution of one operation: the signature plus the input values."""

    signature: OperationSignature
    #: one array per input (0-d for scalars); ``None`` for an omitted input.
    inputs: Sequence[np.ndarray | None]
    #: what ``prepare`` returned for this operation in this prepared model.
    state: Any = None
    #: absolute ``time.monotonic_ns()`` deadline for loops, or ``None``.
    loop_deadline_ns: int | None = None
    #: the running ``executor.PreparedModel``: control flow runs referenced
    #: subgraphs through it.
    model: Any = None

    @property
    def code(self) -> OperationCode:
        return self.signature.code

    def fail(self, message: str) -> NNError:
        """An OP_FAILED error naming this operation, for problems only the
        input values reveal; ``raise ctx.fail(...)`` (``sig.fail`` is BAD_DATA)."""
        return NNError(f"{self.code.name}: {message}", ResultCode.OP_FAILED)

    def input(self, i: int) -> np.ndarray:
        value = self.inputs[i]
        if value is None:
            raise self.signature.fail(f"input {i} is required but was omitted")
        return value

    def scalar(self, i: int) -> Any:
        """Input ``i`` as a Python scalar (int, float or bool)."""
        return self.input(i).item()

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def output_info(self, i: int) -> OperandInfo:
        return self.signature.outputs[i]


Validate = Callable[[OperationSignature], None]
Prepare = Callable[[OperationSignature], Any]
Execute = Callable[[ExecutionContext], Sequence[np.ndarray]]
Kernel = Callable[[Sequence[np.ndarray | None]], Sequence[np.ndarray]]
Bind = Callable[[OperationSignature, Any], Kernel | None]


@dataclass(frozen=True)
class OperationRegistration:
    code: OperationCode
    validate: Validate
    execute: Execute
    prepare: Prepare | None = None
    bind: Bind | None = None


_REGISTRY: dict[OperationCode, OperationRegistration] = {}
_LOADED = False


def register(
    code: OperationCode,
    *,
    validate: Validate,
    execute: Execute,
    prepare: Prepare | None = None,
    bind: Bind | None = None,
) -> None:
    """Register an operation; each code is registered exactly once."""
    code = OperationCode(code)
    if code in _REGISTRY:
        raise RuntimeError(f"operation {code.name} registered twice")
    _REGISTRY[code] = OperationRegistration(code, validate, execute, prepare, bind)


def _load_operation_modules() -> None:
    global _LOADED
    if _LOADED:
        return
    for module in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"{ops.__name__}.{module.name}")
    _LOADED = True


def lookup(code: int) -> OperationRegistration | None:
    """The registration for ``code``, or ``None`` when the CPU driver lacks it."""
    _load_operation_modules()
    try:
        return _REGISTRY.get(OperationCode(code))
    except ValueError:
        return None


def registered_codes() -> frozenset[OperationCode]:
    _load_operation_modules()
    return frozenset(_REGISTRY)
