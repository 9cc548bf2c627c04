"""PP-OCRv4 text recognition (rapidocr-onnxruntime 1.4.4) against onnxruntime.

Its SVTR neck runs multi-head attention through rank-5 reshapes and
transposes: the model needs the nnburst.rank_above_4 extension (docs/extensions.md)
and the CPU driver, which declares it.  With detection and the direction
classifier (tests/test_onnx.py) the whole RapidOCR pipeline runs on nnburst."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from nnburst import onnx as nn_onnx
from nnburst.codes import OperationCode

from .model_cache import wheel_member

ort = pytest.importorskip("onnxruntime")

REC = "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"


@pytest.fixture(scope="module")
def recogniser() -> onnx.ModelProto:
    return onnx.load(str(wheel_member("rapidocr-onnxruntime", "1.4.4", REC)))


@pytest.mark.parametrize("width", [320, 160])
def test_pp_ocrv4_recognition_matches_onnxruntime(recogniser: onnx.ModelProto, width: int) -> None:
    shape = (1, 3, 48, width)  # RapidOCR feeds 48-pixel-high crops, their width as read
    loaded = nn_onnx.load(recogniser, {"x": shape})
    main = loaded.model.hal_model.main
    ranks = [
        len(main.operands[o].info.dimensions or ()) for op in main.operations for o in op.outputs
    ]
    assert max(ranks) == 5  # the attention's reshapes and transposes
    assert OperationCode.SOFTMAX in {op.code for op in main.operations}
    x = np.random.default_rng(width).uniform(-1, 1, shape).astype(np.float32)
    want = ort.InferenceSession(
        recogniser.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})[0]
    with nn_onnx.Runner(loaded, cache_dir=None) as run:
        (got,) = run(x)
    assert got.shape == want.shape == (1, width // 8, 6625)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert (got.argmax(-1) == want.argmax(-1)).all()  # the characters CTC decoding reads
