"""Committed studies (docs/studies/<name>/): the report's tables rebuild byte for byte from the committed records.

Tables and CSVs, not the PNG plots (their bytes depend on the font and renderer of a machine). A study whose
report reads more than its own records (other studies' records, options) names the extra arguments of
``python -m analysis.report`` in ``report_args`` (one line, paths relative to the repository root). A study that
compares two suites commits ``two_suites.md``, rebuilt by ``python -m analysis.two_suites`` with ``two_suites_args``;
one whose answer is a table of paired differences commits ``contrasts.md``, rebuilt by ``python -m analysis.contrasts``
with ``contrasts_args`` (and any further table ``contrasts_<name>.md`` with ``contrasts_<name>_args``)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from analysis.contrasts import main as contrasts_main
from analysis.report import main as report_main
from analysis.two_suites import main as suites_main

REPO = Path(__file__).resolve().parents[1]
STUDIES = REPO / "docs" / "studies"


@pytest.mark.parametrize("name", sorted(p.name for p in STUDIES.iterdir() if (p / "records").is_dir()))
def test_study_report_rebuilds_from_its_records(name, tmp_path, monkeypatch):
    study = STUDIES / name
    extra = shlex.split((study / "report_args").read_text()) if (study / "report_args").exists() else []
    monkeypatch.chdir(REPO)
    assert report_main([str(study / "records"), *extra, "--out", str(tmp_path)]) == 0
    committed = sorted(p.name for p in (study / "report").iterdir() if p.suffix in (".md", ".csv"))
    assert committed and committed == sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".md", ".csv"))
    for file in committed:
        assert (tmp_path / file).read_bytes() == (study / "report" / file).read_bytes(), file


@pytest.mark.parametrize("name", sorted(p.name for p in STUDIES.iterdir() if (p / "two_suites.md").is_file()))
def test_two_suite_comparison_rebuilds_from_its_records(name, tmp_path, monkeypatch):
    study = STUDIES / name
    monkeypatch.chdir(REPO)
    out = tmp_path / "two_suites.md"
    assert suites_main([*shlex.split((study / "two_suites_args").read_text()), "--out", str(out)]) == 0
    assert out.read_bytes() == (study / "two_suites.md").read_bytes()


@pytest.mark.parametrize("table", sorted(str(p.relative_to(STUDIES)) for p in STUDIES.glob("*/contrasts*.md")))
def test_contrasts_rebuild_from_their_records(table, tmp_path, monkeypatch):
    """A study's paired-difference table (``python -m analysis.contrasts $(cat contrasts_args)``, or
    ``contrasts_<name>_args`` for ``contrasts_<name>.md``) is what its committed records give today."""
    committed = STUDIES / table
    monkeypatch.chdir(REPO)
    out = tmp_path / committed.name
    args = committed.with_name(f"{committed.stem}_args").read_text()
    assert contrasts_main([*shlex.split(args), "--out", str(out)]) == 0
    assert out.read_bytes() == committed.read_bytes()
