"""TFLite's sequence LSTM and RNN layers against LiteRT, call after call.

Their state lives in variable tensors, which LiteRT updates at each Invoke
and keeps for the next; nnburst carries it as runner state.  Every case runs
several consecutive calls on one LiteRT interpreter and on one runner and
compares each call's outputs and the state after it.  No real model with
these layers ships in a wheel, so the models are built here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from nnburst import tflite
from nnburst.errors import BadDataError

pytest.importorskip("ai_edge_litert")

from .tflite_builder import (
    OPTIONAL,
    Tensor,
    graph,
    options,
    repack,
    run_litert_calls,
    schema,
    single_op,
)

RNG = np.random.default_rng(13)
F32 = np.float32
ACT = schema.ActivationFunctionType
#: float64 against LiteRT's float32 over a few steps
TOLERANCE = 1e-5
CALLS = 3


@pytest.fixture(autouse=True)
def _same_numbers() -> None:
    """Each test draws the same weights and inputs in whatever order tests run."""
    global RNG
    RNG = np.random.default_rng(13)


def weights(*shape: int, scale: float = 0.5) -> Tensor:
    return Tensor(shape, F32, RNG.uniform(-scale, scale, shape).astype(F32))


def state(*shape: int) -> Tensor:
    return Tensor(shape, F32, variable=True)


def lstm_cell(
    n_input: int,
    n_cell: int,
    n_output: int,
    cifg: bool = False,
    peephole: bool = False,
    projection: bool = False,
    projection_bias: bool = False,
) -> list[Tensor | None]:
    """One direction's 17 tensors (TFLite's LSTM inputs 1..17), None where omitted."""
    gates = 3 if cifg else 4
    inputs: list[Tensor | None] = [None] * (4 - gates)
    inputs += [weights(n_cell, n_input) for _ in range(gates)]
    inputs += [None] * (4 - gates) + [weights(n_cell, n_output) for _ in range(gates)]
    if peephole:
        inputs += [None if cifg else weights(n_cell), weights(n_cell), weights(n_cell)]
    else:
        inputs += [None] * 3
    inputs += [None] * (4 - gates) + [weights(n_cell, scale=1.0) for _ in range(gates)]
    inputs.append(weights(n_output, n_cell) if projection else None)
    inputs.append(weights(n_output) if projection_bias else None)
    return inputs


def run_calls(model: bytes, calls: Sequence[Sequence[np.ndarray]], states: Sequence[int]) -> float:
    """Compare every call's outputs, and the variable tensors ``states`` after it,
    with LiteRT's; the largest difference."""
    want = run_litert_calls(model, calls, states)
    worst = 0.0
    with tflite.Runner(model, cache_dir=None) as run:
        assert len(run.loaded.state) == len(states)
        for inputs, expected in zip(calls, want):
            got = run(*inputs) + run.state
            assert [g.shape for g in got] == [w.shape for w in expected]
            for g, w in zip(got, expected):
                np.testing.assert_allclose(g, w, rtol=TOLERANCE, atol=TOLERANCE)
                worst = max(worst, float(np.abs(g - w).max()))
        run.reset()  # a new stream starts from zero state, as a new interpreter does
        for g, w in zip(run(*calls[0]), want[0]):
            np.testing.assert_allclose(g, w, rtol=TOLERANCE, atol=TOLERANCE)
    # The state carried: a later call differs from the same input on a fresh interpreter.
    fresh = run_litert_calls(model, [calls[-1]])[0]
    assert not np.allclose(fresh[0], want[-1][0], rtol=1e-3, atol=1e-3)
    return worst


def positions(inputs: Sequence[Tensor | None], wanted: Sequence[Tensor]) -> list[int]:
    """The tensor indices ``single_op`` gives ``wanted`` (first appearance order)."""
    order = list({id(t): t for t in inputs if t is not None})
    return [order.index(id(t)) for t in wanted]


LSTM_CASES = {
    "plain": {},
    "cifg": {"cifg": True},
    "peephole": {"peephole": True},
    "cifg peephole": {"cifg": True, "peephole": True},
    "projection": {"projection": True, "n_output": 3},
    "projection bias clipped": {
        "projection": True, "projection_bias": True, "n_output": 3, "proj_clip": 0.2
    },
    "cell clip": {"cell_clip": 0.3},
    "layer norm": {"layer_norm": True},
    "layer norm cifg peephole projection": {
        "layer_norm": True, "cifg": True, "peephole": True, "projection": True, "n_output": 4
    },
    "time major": {"time_major": True, "peephole": True},
    "relu": {"activation": ACT.RELU},
    "relu6": {"activation": ACT.RELU6},
    "relu1": {"activation": ACT.RELU_N1_TO_1},
}  # fmt: skip


def sequence_lstm(
    batch: int = 2,
    steps: int = 3,
    n_input: int = 4,
    n_cell: int = 5,
    n_output: int = 5,
    layer_norm: bool = False,
    time_major: bool = False,
    activation: int = ACT.TANH,
    cell_clip: float = 0.0,
    proj_clip: float = 0.0,
    asymmetric: bool = False,
    **cell: bool,
) -> tuple[bytes, tuple[int, ...], list[int]]:
    """A UNIDIRECTIONAL_SEQUENCE_LSTM model, its input shape and its state tensors."""
    shape = (steps, batch, n_input) if time_major else (batch, steps, n_input)
    h, c = state(batch, n_output), state(batch, n_cell)
    inputs = [Tensor(shape, F32), *lstm_cell(n_input, n_cell, n_output, **cell), h, c]
    if layer_norm:
        inputs += [None if cell.get("cifg") else weights(n_cell, scale=2.0)]
        inputs += [weights(n_cell, scale=2.0) for _ in range(3)]
    out_shape = (*shape[:2], n_output)
    o = options(
        schema.UnidirectionalSequenceLSTMOptionsT,
        fusedActivationFunction=activation, cellClip=cell_clip, projClip=proj_clip,
        timeMajor=time_major, asymmetricQuantizeInputs=asymmetric,
    )  # fmt: skip
    model = single_op("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [Tensor(out_shape, F32)], o)
    return model, shape, positions(inputs, [h, c])


@pytest.mark.parametrize("case", list(LSTM_CASES))
def test_sequence_lstm_matches_litert_call_after_call(case: str) -> None:
    model, shape, states = sequence_lstm(**LSTM_CASES[case])  # type: ignore[arg-type]
    loaded = tflite.load(model)
    codes = [op.code.name for op in loaded.model.hal_model.main.operations]
    assert codes == ["UNIDIRECTIONAL_SEQUENCE_LSTM"]
    calls = [[RNG.uniform(-1, 1, shape).astype(F32)] for _ in range(CALLS)]
    run_calls(model, calls, states)


def test_stacked_lstms_each_carry_their_own_state() -> None:
    """Two layers, a projection between (FULLY_CONNECTED on every step), as a
    keyword spotter stacks them: four variables, each fed back to its own layer."""
    batch, steps, n_input, n_cell = 1, 4, 3, 4
    tensors: list[Tensor] = [Tensor((batch, steps, n_input), F32)]
    operators: list[tuple[Any, ...]] = []
    o = options(schema.UnidirectionalSequenceLSTMOptionsT, fusedActivationFunction=ACT.TANH)
    states: list[int] = []
    source = 0
    for layer in range(2):
        width = tensors[source].shape[-1]
        inputs = [source]
        for t in lstm_cell(width, n_cell, n_cell, peephole=layer == 1):
            inputs.append(OPTIONAL if t is None else len(tensors))
            tensors += [] if t is None else [t]
        for shape in ((batch, n_cell), (batch, n_cell)):
            states.append(len(tensors))
            inputs.append(len(tensors))
            tensors.append(state(*shape))
        tensors.append(Tensor((batch, steps, n_cell), F32))
        operators.append(("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [len(tensors) - 1], o))
        source = len(tensors) - 1
        if layer == 0:
            tensors += [weights(3, n_cell), weights(3), Tensor((batch, steps, 3), F32)]
            fc = options(schema.FullyConnectedOptionsT, keepNumDims=True)
            operators.append(
                ("FULLY_CONNECTED", [source, source + 1, source + 2], [source + 3], fc)
            )
            source += 3
    model = graph(tensors, operators, [0], [source])
    calls = [[RNG.uniform(-1, 1, (batch, steps, n_input)).astype(F32)] for _ in range(CALLS)]
    run_calls(model, calls, states)


def test_asymmetric_quantize_inputs_changes_nothing_in_a_float_lstm() -> None:
    """The flag is for hybrid layers (refused): a float LSTM ignores it in LiteRT too."""
    model, shape, states = sequence_lstm(asymmetric=True)
    calls = [[RNG.uniform(-1, 1, shape).astype(F32)] for _ in range(CALLS)]
    run_calls(model, calls, states)


def bidirectional_lstm(
    merge: bool, time_major: bool = True, aux: str = ""
) -> tuple[bytes, list[tuple[int, ...]], list[int]]:
    """A BIDIRECTIONAL_SEQUENCE_LSTM model (peepholes forward, CIFG and a
    projection bias backward; LiteRT wants the sizes of both alike), its input
    shapes and its four state tensors.  ``aux``: "parallel" feeds an aux
    input to the backward cell, "cross" adds it to both through aux weights."""
    batch, steps, n_input, n_cell, fw_out, bw_out = 2, 3, 4, 5, 3, 3
    shape = (steps, batch, n_input) if time_major else (batch, steps, n_input)
    fw = lstm_cell(n_input, n_cell, fw_out, peephole=True, projection=True)
    bw = lstm_cell(n_input, n_cell, bw_out, cifg=True, projection=True, projection_bias=True)
    states = [
        state(batch, fw_out),
        state(batch, n_cell),
        state(batch, bw_out),
        state(batch, n_cell),
    ]
    aux_shape = (*shape[:2], 2 if aux == "cross" else n_input)
    aux_input: list[Tensor | None] = [Tensor(aux_shape, F32) if aux else None]
    aux_weights: list[Tensor | None] = [None] * 8
    if aux == "cross":
        aux_weights = [weights(n_cell, 2) for _ in range(4)]
        aux_weights += [None] + [weights(n_cell, 2) for _ in range(3)]
    inputs = [Tensor(shape, F32), *fw, *bw, *states, *aux_input, *aux_weights]
    if merge:
        outputs = [Tensor((*shape[:2], fw_out + bw_out), F32)]
    else:
        outputs = [Tensor((*shape[:2], fw_out), F32), Tensor((*shape[:2], bw_out), F32)]
    o = options(schema.BidirectionalSequenceLSTMOptionsT, fusedActivationFunction=ACT.TANH,
                cellClip=2.0, mergeOutputs=merge, timeMajor=time_major)  # fmt: skip
    model = single_op("BIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, o)
    shapes = [shape, aux_shape] if aux else [shape]
    return model, shapes, positions(inputs, states)


@pytest.mark.parametrize(
    "merge, time_major, aux",
    [(False, True, ""), (True, True, ""), (False, False, ""), (True, True, "parallel"),
     (False, False, "parallel"), (False, True, "cross"), (True, True, "cross")],
)  # fmt: skip
def test_bidirectional_lstm_matches_litert_call_after_call(
    merge: bool, time_major: bool, aux: str
) -> None:
    model, shapes, states = bidirectional_lstm(merge, time_major, aux)
    calls = [[RNG.uniform(-1, 1, s).astype(F32) for s in shapes] for _ in range(CALLS)]
    run_calls(model, calls, states)


def rnn_bias(units: int) -> Tensor:
    """Positive, so that the RELU keeps most of the state alive from call to call."""
    return Tensor((units,), F32, RNG.uniform(0.2, 0.8, units).astype(F32))


def sequence_rnn(
    time_major: bool, activation: int = ACT.RELU
) -> tuple[bytes, tuple[int, ...], list[int]]:
    batch, steps, n_input, units = 2, 4, 3, 5
    shape = (steps, batch, n_input) if time_major else (batch, steps, n_input)
    h = state(batch, units)
    inputs = [
        Tensor(shape, F32),
        weights(units, n_input),
        weights(units, units),
        rnn_bias(units),
        h,
    ]
    o = options(schema.SequenceRNNOptionsT, fusedActivationFunction=activation,
                timeMajor=time_major)  # fmt: skip
    model = single_op("UNIDIRECTIONAL_SEQUENCE_RNN", inputs, [Tensor((*shape[:2], units), F32)], o)
    return model, shape, positions(inputs, [h])


@pytest.mark.parametrize(
    "time_major, activation", [(False, ACT.RELU), (True, ACT.RELU), (False, ACT.NONE)]
)
def test_sequence_rnn_matches_litert_call_after_call(time_major: bool, activation: int) -> None:
    model, shape, states = sequence_rnn(time_major, activation)
    calls = [[RNG.uniform(-1, 1, shape).astype(F32)] for _ in range(CALLS)]
    run_calls(model, calls, states)


def bidirectional_rnn(
    merge: bool, time_major: bool, aux: str, n_aux: int = 2
) -> tuple[bytes, list[Any], list[int]]:
    """A BIDIRECTIONAL_SEQUENCE_RNN model, its input shapes and its two state
    tensors; ``aux`` as for ``bidirectional_lstm``, ``n_aux`` its aux features
    when "cross"."""
    batch, steps, n_input, units = 2, 4, 3, 5
    shape = (steps, batch, n_input) if time_major else (batch, steps, n_input)
    aux_shape = (*shape[:2], n_aux if aux == "cross" else n_input)
    fw_h, bw_h = state(batch, units), state(batch, units)
    direction = lambda: [weights(units, n_input), weights(units, units), rnn_bias(units)]  # noqa: E731
    inputs = [Tensor(shape, F32), *direction(), fw_h, *direction(), bw_h]
    inputs += [Tensor(aux_shape, F32) if aux else None]
    inputs += [weights(units, n_aux), weights(units, n_aux)] if aux == "cross" else [None, None]
    if merge:
        outputs = [Tensor((*shape[:2], 2 * units), F32)]
    else:
        outputs = [Tensor((*shape[:2], units), F32), Tensor((*shape[:2], units), F32)]
    o = options(schema.BidirectionalSequenceRNNOptionsT, fusedActivationFunction=ACT.RELU,
                mergeOutputs=merge, timeMajor=time_major)  # fmt: skip
    model = single_op("BIDIRECTIONAL_SEQUENCE_RNN", inputs, outputs, o)
    return model, [shape, aux_shape] if aux else [shape], positions(inputs, [fw_h, bw_h])


@pytest.mark.parametrize(
    "merge, time_major, aux, n_aux",
    [(False, False, "", 0), (True, False, "", 0), (False, True, "", 0),
     (True, True, "parallel", 0), (False, False, "cross", 2), (True, False, "cross", 2),
     (True, True, "cross", 3)],
)  # fmt: skip
def test_bidirectional_rnn_matches_litert_call_after_call(
    merge: bool, time_major: bool, aux: str, n_aux: int
) -> None:
    model, shapes, states = bidirectional_rnn(merge, time_major, aux, n_aux)
    calls = [[RNG.uniform(-1, 1, s).astype(F32) for s in shapes] for _ in range(CALLS)]
    run_calls(model, calls, states)


def refused(model: bytes, reason: str) -> None:
    with pytest.raises(tflite.UnsupportedModelError) as error:
        tflite.load(model)
    assert reason in error.value.listed


def hybrid(t: Tensor | None) -> Tensor | None:
    """Int8 weights of a float layer, as TFLite's dynamic-range quantization writes them."""
    if t is None or t.data is None or len(t.shape) != 2:
        return t
    return Tensor(t.shape, np.int8, np.round(t.data * 254).astype(np.int8), scale=1 / 254)


def test_a_hybrid_lstm_is_refused_by_name() -> None:
    batch, steps, n_input, n_cell = 1, 2, 3, 4
    cell = [hybrid(t) for t in lstm_cell(n_input, n_cell, n_cell)]
    inputs = [
        Tensor((batch, steps, n_input), F32),
        *cell,
        state(batch, n_cell),
        state(batch, n_cell),
    ]
    o = options(schema.UnidirectionalSequenceLSTMOptionsT, fusedActivationFunction=ACT.TANH)
    model = single_op(
        "UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [Tensor((batch, steps, n_cell), F32)], o
    )
    refused(model, "UNIDIRECTIONAL_SEQUENCE_LSTM (INT8 tensors (a hybrid or integer LSTM))")


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"fusedActivationFunction": ACT.NONE}, "activation NONE"),
        ({"fusedActivationFunction": ACT.SIGN_BIT}, "fused activation 5"),
        ({"diagonalRecurrentTensors": True}, "diagonal recurrent weights"),
    ],
    ids=["none", "sign bit", "diagonal"],
)
def test_lstm_options_litert_computes_otherwise_are_refused(
    fields: dict[str, Any], reason: str
) -> None:
    model, _, _ = sequence_lstm()
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    for name, value in fields.items():
        setattr(parsed.subgraphs[0].operators[0].builtinOptions, name, value)
    refused(repack(parsed), f"UNIDIRECTIONAL_SEQUENCE_LSTM ({reason}")


def test_merged_outputs_of_batch_major_bidirectional_lstm_are_refused() -> None:
    """LiteRT's kernel gives every batch after the first other values there."""
    model, _, _ = bidirectional_lstm(merge=True, time_major=False)
    refused(model, "BIDIRECTIONAL_SEQUENCE_LSTM (merged outputs of batch-major sequences")


def test_bidirectional_rnn_aux_inputs_litert_reads_otherwise_are_refused() -> None:
    """Batch-major, LiteRT's backward cell reads the input instead of an aux input
    given alone; time-major, it steps through an aux input by the input's size."""
    model, _, _ = bidirectional_rnn(merge=False, time_major=False, aux="parallel")
    refused(model, "BIDIRECTIONAL_SEQUENCE_RNN (an aux input without aux weights")
    model, _, _ = bidirectional_rnn(merge=False, time_major=True, aux="cross", n_aux=2)
    refused(model, "BIDIRECTIONAL_SEQUENCE_RNN (aux weights over time-major sequences")


def test_a_tanh_rnn_is_refused() -> None:
    """NNAPI's sequence RNNs take a FuseCode, which has no TANH."""
    model, _, _ = sequence_rnn(time_major=False, activation=ACT.TANH)
    refused(model, "UNIDIRECTIONAL_SEQUENCE_RNN (TANH activation")


def test_state_that_is_not_a_variable_tensor_is_refused() -> None:
    """LiteRT keeps state only in variable tensors; an input or a constant is not state."""
    model, _, _ = sequence_rnn(time_major=False)
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    parsed.subgraphs[0].tensors[4].isVariable = False
    refused(repack(parsed), "a state input that is not a variable tensor")
    parsed.subgraphs[0].tensors[4].isVariable = True
    parsed.subgraphs[0].inputs = [0, 4]
    refused(repack(parsed), "a state input that is not a variable tensor of its own")


def test_malformed_recurrent_operators_are_refused_clearly() -> None:
    """Too few or too many inputs, too few outputs: an importer error, not an IndexError."""
    model, _, _ = sequence_rnn(time_major=False)
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    parsed.subgraphs[0].operators[0].inputs = [0, 1, 2, 3]  # the state omitted
    refused(repack(parsed), "a state input that is not a variable tensor")
    parsed.subgraphs[0].operators[0].inputs = [0, 1, 2, 3, 4, 4]
    with pytest.raises(BadDataError, match="6 inputs, 5 at most"):
        tflite.load(repack(parsed))
    model, _, _ = bidirectional_lstm(merge=False)
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    parsed.subgraphs[0].operators[0].outputs = parsed.subgraphs[0].operators[0].outputs[:1]
    with pytest.raises(BadDataError, match="1 outputs of 2"):
        tflite.load(repack(parsed))


def test_variable_tensors_as_model_outputs() -> None:
    """An LSTM's state exposed as outputs too; a variable tensor no operator
    updates stays zero, and is an output as well."""
    model, shape, states = sequence_lstm()
    parsed = schema.ModelT.InitFromPackedBuf(model, 0)
    parsed.subgraphs[0].outputs = [*parsed.subgraphs[0].outputs, *states]
    calls = [[RNG.uniform(-1, 1, shape).astype(F32)] for _ in range(CALLS)]
    run_calls(repack(parsed), calls, states)
    tensors = [Tensor((1, 4), F32), state(1, 4), Tensor((1, 4), F32)]
    model = graph(tensors, [("ADD", [0, 1], [2], schema.AddOptionsT())], [0], [2, 1])
    x = RNG.uniform(-1, 1, (1, 4)).astype(F32)
    with tflite.Runner(model, cache_dir=None) as run:
        for _ in range(2):
            got, stays = run(x)
            np.testing.assert_array_equal(got, x)
            np.testing.assert_array_equal(stays, np.zeros((1, 4), F32))
    assert [w.tolist() for w in run_litert_calls(model, [[x]])[0]] == [x.tolist(), stays.tolist()]


# -- the quantized basic LSTM cell (kernel_type BASIC) ---------------------------------------


def basic_lstm_cell(batch: int, n_input: int, units: int, kernel_type: int = 1) -> bytes:
    """TFLite's quantized basic cell: uint8 input and output at 1/128, zero point 128,
    packed uint8 weights [4·units, input + units], int32 bias, int16 cell state at
    2^-11; two scratch outputs.  The state comes in and goes out as model tensors."""
    q8 = {"scale": 1 / 128, "zero_point": 128}
    cell = {"scale": 2.0**-11, "zero_point": 0}
    w_scale = 0.05
    x, previous = Tensor((batch, n_input), np.uint8, **q8), Tensor((batch, units), np.uint8, **q8)
    packed = RNG.integers(60, 200, (4 * units, n_input + units)).astype(np.uint8)
    w = Tensor(packed.shape, np.uint8, packed, scale=w_scale, zero_point=130)
    b = Tensor((4 * units,), np.int32, RNG.integers(-3000, 3000, 4 * units).astype(np.int32),
               scale=w_scale / 128, zero_point=0)  # fmt: skip
    prev_cell = Tensor((batch, units), np.int16, **cell)
    out, new_cell = Tensor((batch, units), np.uint8, **q8), Tensor((batch, units), np.int16, **cell)
    concat = Tensor((batch, n_input + units), np.uint8, **q8)
    gates = Tensor((batch, 4 * units), np.int16, scale=2.0**-12, zero_point=0)
    o = options(
        schema.LSTMOptionsT,
        fusedActivationFunction=ACT.TANH,
        kernelType=kernel_type,
    )
    tensors = [x, previous, w, b, prev_cell, out, new_cell, concat, gates]
    return graph(tensors, [("LSTM", [0, 1, 2, 3, 4], [5, 6, 7, 8], o, 2)], [0, 1, 4], [5, 6])


@pytest.mark.parametrize(("n_input", "units"), [(3, 5), (6, 4), (4, 4)])
def test_basic_quantized_lstm_cell_steps_like_litert(n_input: int, units: int) -> None:
    """QUANTIZED_16BIT_LSTM, whatever the input and unit counts (the packed weights'
    first columns go to NNAPI's recurrent operands: see the importer).  NNAPI
    rounds each gate's sums twice, LiteRT once: a gate is now and then 1 lower,
    which moves the int16 cell state by at most 2 of its steps."""
    model = basic_lstm_cell(2, n_input, units)
    loaded = tflite.load(model)
    assert [op.code.name for op in loaded.model.hal_model.main.operations] == [
        "QUANTIZED_16BIT_LSTM"
    ]
    calls = [
        [
            RNG.integers(0, 256, (2, n_input)).astype(np.uint8),
            RNG.integers(0, 256, (2, units)).astype(np.uint8),
            RNG.integers(-12000, 12000, (2, units)).astype(np.int16),
        ]
        for _ in range(8)
    ]
    with tflite.Runner(loaded, cache_dir=None) as run:
        for inputs, (out, cell) in zip(calls, run_litert_calls(model, calls)):
            got_out, got_cell = run(*inputs)
            assert np.abs(got_out.astype(int) - out).max() <= 1
            assert np.abs(got_cell.astype(int) - cell).max() <= 2


def test_a_float_lstm_cell_is_refused() -> None:
    refused(basic_lstm_cell(1, 3, 4, kernel_type=0), "LSTM (a float LSTM cell")


def test_a_basic_cell_that_does_not_add_up_is_refused_clearly() -> None:
    """Weights for another input size: an importer error naming the sizes; a
    scratch output the model reads (nothing computes it): refused."""
    parsed = schema.ModelT.InitFromPackedBuf(basic_lstm_cell(1, 3, 4), 0)
    parsed.subgraphs[0].tensors[0].shape = [1, 5]
    with pytest.raises(BadDataError, match=r"weights \(16, 7\) .* do not fit 5 inputs and 4"):
        tflite.load(repack(parsed))
    parsed = schema.ModelT.InitFromPackedBuf(basic_lstm_cell(1, 3, 4), 0)
    parsed.subgraphs[0].outputs = [5, 6, 8]
    refused(repack(parsed), "LSTM (a basic cell whose scratch outputs are read)")
