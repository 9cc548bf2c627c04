"""``nnburst bench``'s facade rows: the ADD+MUL model through the Runner,
``InferenceSession.run`` and the LiteRT-style invoke cycle, timed in turns."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnx", reason="nnburst.onnx needs onnx (pip install '.[onnx]')")

from nnburst.tools.benchmarks import facades, report, runtime_bench, runtime_paths


def test_the_tflite_add_mul_is_the_workloads_model_on_litert() -> None:
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT is the reference")
    work = runtime_paths.add_mul_model()
    interpreter = litert.Interpreter(model_content=facades.add_mul_tflite(work))
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), work.inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    np.testing.assert_array_equal(got, (work.inputs[0] + work.inputs[1]) * work.constants["c"])


def test_every_call_is_timed_in_turns_and_compared_with_the_runner() -> None:
    work = runtime_paths.add_mul_model()
    with facades.facade_calls(work) as calls:
        assert list(calls) == [facades.RUNNER, *facades.FACADES]
        rows = facades.overheads(calls, seconds=0.05, pairs=40)
    assert [r.facade for r in rows] == list(facades.FACADES)
    for row in rows:
        assert row.runner_us > 0 and row.facade_us > 0
        assert abs(row.added_us) < row.facade_us + row.runner_us
    text = facades.lines(rows)
    assert text[0] == "" and text[1].startswith("Facades, in-process") and len(text) == 4
    assert all("goal <= 5" in line for line in text[2:])


def test_a_facade_that_answers_wrong_is_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    work = runtime_paths.add_mul_model()
    real = facades.add_mul_tflite

    def other_constant(w: runtime_paths.Workload) -> bytes:
        changed = runtime_paths.Workload(
            w.name, w.model, w.inputs, w.output, {"c": w.constants["c"] * 2}
        )
        return real(changed)

    monkeypatch.setattr(facades, "add_mul_tflite", other_constant)
    with pytest.raises(AssertionError):
        with facades.facade_calls(work):
            pass


def test_the_add_mul_table_ends_with_the_facade_rows() -> None:
    settings = runtime_bench.Settings(
        models=("add-mul",), paths=("sync",), placements=("in-process",), duration=0.05
    )
    result = runtime_bench.run(settings)
    assert [r.facade for r in result.facades] == list(facades.FACADES)
    assert result.facades_failed is None
    table = runtime_bench.table(result)
    assert "InferenceSession.run" in table and "Interpreter invoke cycle" in table
    assert table.index("sync in-process") < table.index("Facades, in-process")
    document = json.loads(json.dumps(report.build_runtime(result)))
    assert report.validate(document) == []
    document["facades"][0]["added_us"] = "fast"
    assert report.validate(document) == ["facades[0].added_us: expected float, got str"]
    document["facades"][0]["added_us"] = result.facades[0].added_us
    assert [row["facade"] for row in document["facades"]] == list(facades.FACADES)
    assert document["facades"][0]["added_us"] == result.facades[0].added_us


def test_without_the_onnx_package_the_rows_say_how_to_get_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(*args: object, **kwargs: object) -> None:
        raise ImportError(
            "nnburst.onnx needs the onnx package: pip install onnx "
            "(or pip install '.[onnx]' in nnburst's checkout)"
        )

    monkeypatch.setattr(facades, "measure", missing)
    rows, why = runtime_bench._facades(runtime_bench.Settings())
    assert rows == [] and why is not None
    assert "pip install onnx" in why and max(len(line) for line in why.splitlines()) <= 100
