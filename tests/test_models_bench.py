"""``nnburst bench --models DIR`` (nnburst/benchmarks/models_bench.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from nnburst.benchmarks import models_bench
from nnburst.benchmarks.models_bench import ModelRow
from nnburst.cli import main


def test_the_table_gives_a_geometric_mean_per_kind() -> None:
    rows = [
        ModelRow("a.tflite", ".tflite", "LiteRT in-process", 100.0, 200.0),
        ModelRow("b.tflite", ".tflite", "LiteRT in-process", 100.0, 50.0),
        ModelRow("c.onnx", ".onnx", "onnxruntime in-process", 10.0, 30.0),
    ]
    text = models_bench.table(rows)
    assert "2 .tflite model(s): 1.00x (max 2.00x)" in text  # sqrt(2 * 0.5)
    assert "1 .onnx model(s): 3.00x (max 3.00x)" in text
    assert math.isclose(models_bench.geometric_mean([4.0, 1.0]), 2.0)


def test_every_model_file_gets_a_row_or_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ai_edge_litert", reason="LiteRT is the .tflite files' runtime")
    from .tflite_builder import Tensor, schema, single_op

    a, b, total = (Tensor((2, 3), np.float32) for _ in range(3))
    model = single_op("ADD", [a, b], [total], schema.AddOptionsT())
    (tmp_path / "add.tflite").write_bytes(model)
    (tmp_path / "broken.tflite").write_bytes(b"not a model")
    (tmp_path / "notes.txt").write_text("not a model file")
    code = main(["bench", "--models", str(tmp_path), "--duration", "0.2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "2 model file(s)" in out
    assert "add.tflite" in out and "1 .tflite model(s)" in out
    assert "broken.tflite: not loaded" in out and "notes.txt" not in out


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--models", "/no/such/folder"], 1, "no such folder"),
        (["--models", ".", "--json", "x.json"], 2, "--json does not apply to --models"),
        (["fmq", "--models", "."], 2, "fmq does not apply to --models"),
    ],
)
def test_bad_models_arguments_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    assert main(["bench", *argv]) == code
    out, err = capsys.readouterr()
    assert message in err and "Traceback" not in err


def test_a_folder_without_models_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--models", str(tmp_path)]) == 1
    assert "no model could be timed" in capsys.readouterr().err
