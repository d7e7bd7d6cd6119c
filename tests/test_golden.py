"""Golden storage: serializer / storage / comparator, each on its own."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.errors import CorruptFile
from harness.golden.serializer import INLINE_MAX_ELEMENTS, encode, tensor_array
from harness.golden.storage import Golden, golden_path, read_golden, write_golden
from harness.suite.compare import Comparator, Tolerance, tolerance_for


def test_tensor_keeps_dtype_and_shape_inline():
    side: dict = {}
    node = encode({"t": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)}, side)
    meta = node["t"]["__tensor__"]
    assert meta["dtype"] == "int32" and meta["shape"] == [2, 2] and meta["data"] == [[1, 2], [3, 4]]
    assert not side


def test_large_tensor_goes_to_sidecar_and_round_trips(tmp_path):
    side: dict = {}
    arr = np.arange(INLINE_MAX_ELEMENTS + 1, dtype=np.float32)
    node = encode({"big": arr}, side)
    assert "sidecar" in node["big"]["__tensor__"] and len(side) == 1
    path = golden_path(tmp_path, "s", "c[1]")
    write_golden(path, Golden("s", "c[1]", node, side))
    back = read_golden(path)
    np.testing.assert_array_equal(tensor_array(back.value["big"], back.sidecar), arr)


def test_unsupported_type_is_refused():
    with pytest.raises(TypeError, match="cannot store"):
        encode({"x": object()}, {})


def test_integers_compare_exactly_with_first_index_and_rows():
    exp = encode({"cu": torch.tensor([0, 5, 9, 12])}, {})
    obt = encode({"cu": torch.tensor([0, 5, 10, 12])}, {})
    result = Comparator().compare(exp, obt)
    assert not result.ok
    m = result.mismatches[0]
    assert m.path == "$.cu" and m.first_index == [2] and m.expected == 9 and m.obtained == 10
    assert m.expected_row == [0, 5, 9, 12] and m.obtained_row == [0, 5, 10, 12]
    assert "first at index [2]" in result.text()


def test_float_tolerance_per_field_most_specific_wins():
    tols = {"$.*": Tolerance(0.0, 0.0), "$.logits": Tolerance(1e-3, 0.0)}
    assert tolerance_for("$.logits", tols).atol == 1e-3
    exp = encode({"logits": np.array([1.0, 2.0]), "loss": 0.5}, {})
    near = encode({"logits": np.array([1.0005, 2.0]), "loss": 0.5}, {})
    far = encode({"logits": np.array([1.0, 2.0]), "loss": 0.5001}, {})
    assert Comparator(tols).compare(exp, near).ok
    bad = Comparator(tols).compare(exp, far)
    assert [m.path for m in bad.mismatches] == ["$.loss"]
    assert bad.mismatches[0].max_abs == pytest.approx(1e-4)


def test_shape_dtype_missing_extra_are_reported():
    exp = encode({"a": torch.zeros(3, dtype=torch.int64), "b": 1, "c": [1, 2]}, {})
    obt = encode({"a": torch.zeros(4, dtype=torch.int64), "d": 2, "c": [1, 2, 3]}, {})
    kinds = {m.path: m.kind for m in Comparator().compare(exp, obt).mismatches}
    assert kinds == {"$.a": "shape", "$.b": "missing", "$.d": "extra", "$.c": "shape"}
    dt = Comparator().compare(
        encode(torch.zeros(2, dtype=torch.int32), {}), encode(torch.zeros(2, dtype=torch.int64), {})
    )
    assert dt.mismatches[0].kind == "dtype"


def test_ragged_lists_of_different_lengths_are_a_mismatch_not_a_crash():
    """Packing bins are ragged lists; a changed packing must read as a golden mismatch."""
    exp = encode({"bins": [[52, 3, 5, 1, 1, 2], [55]]}, {})
    obt = encode({"bins": [[52, 3, 5, 1, 1], [55, 5], [33]]}, {})
    result = Comparator().compare(exp, obt)
    assert not result.ok and [m.path for m in result.mismatches] == ["$.bins"]
    assert "$.bins" in result.text()


def test_bool_vs_int_is_a_type_change():
    result = Comparator().compare({"accepted": True}, {"accepted": 1})
    assert not result.ok


def test_corrupt_golden_is_a_one_line_error(tmp_path):
    path = tmp_path / "s" / "c.json"
    path.parent.mkdir()
    path.write_text("{not json")
    with pytest.raises(CorruptFile, match="not valid JSON"):
        read_golden(path)
    path.write_text(json.dumps({"kind": "harness-golden", "schema_version": 99, "value": 1}))
    with pytest.raises(CorruptFile, match="newer"):
        read_golden(path)
    path.write_text(json.dumps({"kind": "something-else", "schema_version": 1}))
    with pytest.raises(CorruptFile, match="not a harness-golden"):
        read_golden(path)


def test_golden_file_is_versioned_with_provenance(tmp_path):
    path = golden_path(tmp_path, "suite", "case")
    write_golden(path, Golden("suite", "case", {"x": 1}, {}, {"$.x": Tolerance(0.1, 0.0)}, {"mb_version": "0.6.2"}))
    doc = json.loads(path.read_text())
    assert doc["kind"] == "harness-golden" and doc["schema_version"] == 1
    assert doc["provenance"]["mb_version"] == "0.6.2" and doc["tolerances"]["$.x"]["atol"] == 0.1
    assert not list(tmp_path.rglob("*.tmp")), "atomic write leaves no temp file"
