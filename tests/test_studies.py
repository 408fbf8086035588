"""Committed studies (docs/studies/<name>/): the report's tables rebuild byte for byte from the committed records.

Tables and CSVs, not the PNG plots (their bytes depend on the font and renderer of a machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.report import main as report_main

STUDIES = Path(__file__).resolve().parents[1] / "docs" / "studies"


@pytest.mark.parametrize("name", sorted(p.name for p in STUDIES.iterdir() if (p / "records").is_dir()))
def test_study_report_rebuilds_from_its_records(name, tmp_path):
    study = STUDIES / name
    assert report_main([str(study / "records"), "--out", str(tmp_path)]) == 0
    committed = sorted(p.name for p in (study / "report").iterdir() if p.suffix in (".md", ".csv"))
    assert committed and committed == sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".md", ".csv"))
    for file in committed:
        assert (tmp_path / file).read_bytes() == (study / "report" / file).read_bytes(), file
