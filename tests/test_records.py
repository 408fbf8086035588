"""The run record as a type: every committed record loads as a ``RunRecord`` and writes back the same fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hero.records import RunRecord

DOCS = Path(__file__).resolve().parents[1] / "docs"
COMMITTED = sorted(DOCS.rglob("results.json"))


def test_there_are_committed_records_to_check():
    assert len(COMMITTED) > 100


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(DOCS)))
def test_committed_record_loads_and_round_trips(path):
    data = json.loads(path.read_text())
    record = RunRecord.from_dict(data)
    assert record.variant == data.get("variant", data.get("ablation"))
    back = record.to_dict()
    data.pop("ablation", None)
    if "baseline" in data:  # a Table 1 method's section, named method_card since "baseline" means the dense reference
        data["method_card"] = data.pop("baseline")
        assert "baseline" not in back
    assert {k: back[k] for k in data} == data


def test_optional_fields_are_left_out_and_unknown_fields_refused(tmp_path):
    record = RunRecord(
        status="failed",
        method="hero",
        variant="full",
        backbone="tiny",
        seed=1,
        alpha=0.1,
        layer_set="all",
        memory_dim=8,
        config_hash="0" * 16,
        error="ValueError: x",
    )
    data = json.loads(record.write(tmp_path / "r.json").read_text())
    assert list(data)[0] == "schema_version" and "calibration" not in data and data["error"] == "ValueError: x"
    with pytest.raises(ValueError, match="launch_hsah"):
        RunRecord.from_dict({**data, "launch_hsah": "x"})
