"""analysis.two_suites: the same runs on two suites, read from committed real records (docs/studies/hero_gap_smollm2:
its own-suite records and the runs rescored on the paper suite; docs/studies/paper_suite_smollm2, which shares
some of those runs)."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from analysis.two_suites import compare, main, spearman

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "docs" / "studies" / "hero_gap_smollm2"
OWN, PAPER = STUDY / "records", STUDY / "paper_suite"
OTHER = REPO / "docs" / "studies" / "paper_suite_smollm2"


def _retain(name: str, root: Path = OWN) -> float:
    return json.loads((root / name / "results.json").read_text())["retain"]["value"]


def test_rows_read_each_suite_and_the_differences_pair_seeds():
    text = compare(str(OWN), str(PAPER), "variant=full,alpha=0.001")
    hero = [_retain(f"hero-full-a0.001-s{s}") for s in (42, 43, 44)]
    row = next(line for line in text.splitlines() if line.startswith("| hero/full α=0.001 |"))
    paper = [_retain(f"hero-full-a0.001-s{s}", PAPER) for s in (42, 43, 44)]
    assert f"| 42,43,44 | {statistics.mean(hero):.2f} ± {statistics.stdev(hero):.2f} | 42,43,44 |" in row
    assert f"| {statistics.mean(paper):.2f} ± {statistics.stdev(paper):.2f} |" in row
    assert "| dense | 42 | 100 (baseline) | – | – | – |" in text
    st = [_retain(f"hero-full+straight_through+layers_15_28-a0.002-s{s}") for s in (42, 43, 44)]
    diffs = [a - b for a, b in zip(st, hero)]
    line = next(
        x for x in text.splitlines() if x.startswith("| hero/full+straight_through+layers_15_28 α=0.002 | smollm2")
    )
    assert f"| smollm2 | 3 | {statistics.mean(diffs):+.2f} | {statistics.stdev(diffs):.2f} |" in line
    # one seed on the paper suite (seed 42) is no paired difference: that line is left out, the smollm2 one is not
    assert any(x.startswith("| hero/full+layers_15_28 α=0.001 | smollm2 | 3 |") for x in text.splitlines())
    assert not any(x.startswith("| hero/full+layers_15_28 α=0.001 | paper7_cpu") for x in text.splitlines())


def test_two_studies_joined_read_a_shared_run_once():
    """paper_suite_smollm2 holds copies of hero_gap's full-HeRo and SkipGPT-RT seed-42 runs (same config_hash):
    joined with commas, each run counts once, and SkipGPT-RT gets paper_suite_smollm2's seeds 43-44."""
    joined = compare(f"{OWN},{OTHER / 'records'}", f"{PAPER},{OTHER / 'paper_suite'}", "variant=full,alpha=0.001")
    row = next(line for line in joined.splitlines() if line.startswith("| skipgpt_rt knob=0.488 |"))
    own = [_retain(f"skipgpt_rt-r0.488-s{s}", OTHER / "records") for s in (42, 43, 44)]
    assert row.startswith(
        f"| skipgpt_rt knob=0.488 | 42,43,44 | {statistics.mean(own):.2f} ± {statistics.stdev(own):.2f} |"
    )
    hero = next(line for line in joined.splitlines() if line.startswith("| hero/full α=0.001 |"))
    assert "| 42,43,44 |" in hero and "42,42" not in hero


def test_spearman_uses_average_ranks_and_needs_three_pairs():
    assert spearman([1.0, 2.0, 3.0], [10.0, 30.0, 20.0]) == pytest.approx(0.5)
    assert spearman([1.0, 2.0, 2.0], [1.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert spearman([1.0, 2.0], [2.0, 1.0]) is None


def test_records_of_two_suites_in_one_directory_fail_with_one_line(tmp_path, capsys):
    for root, name in ((OWN, "hero-full-a0.001-s42"), (PAPER, "skipgpt_rt-r0.488-s42")):
        shutil.copytree(root / name, tmp_path / "mixed" / root.name / name)
    assert main([str(tmp_path / "mixed"), str(PAPER)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "one suite" in err and "'paper7_cpu', 'smollm2'" in err
    assert main([str(tmp_path / "nowhere"), str(PAPER)]) == 2
    assert "no such records directory" in capsys.readouterr().err
    assert main([str(OWN), str(PAPER), "--reference", "method=lora"]) == 2
    assert "--reference" in capsys.readouterr().err
