"""The calibration samplers' benchmark (``python -m hero.bench.calibration``), whose numbers docs/calibration cites."""

from __future__ import annotations

import math
import re

import pytest

from hero.bench.calibration import PAPER, Recorded, isotonic, main


def test_isotonic_pools_adjacent_violators_into_their_mean():
    assert isotonic([(0, 0.1), (1, 0.3), (2, 0.2), (3, 0.4)]) == [(0, 0.1), (1, 0.25), (2, 0.25), (3, 0.4)]
    pooled = isotonic([(0, 0.3), (1, 0.2), (2, 0.1)])
    assert [x for x, _ in pooled] == [0, 1, 2] and [y for _, y in pooled] == pytest.approx([0.2, 0.2, 0.2])
    response = Recorded(PAPER)
    assert response(1e-4) == 0.1319 and response(1e-3) == 0.2687  # the paper's own points
    assert response(1e-6) == 0.1319 and response(1.0) == 0.2687  # flat outside
    assert response(10 ** ((math.log10(3e-4) + math.log10(5e-4)) / 2)) == pytest.approx((0.1814 + 0.2340) / 2)


def test_on_the_papers_response_the_monotone_sampler_needs_the_trials_the_docs_cite(capsys):
    """docs/calibration/README.md: monotone 4 / 4 / 6 trials at targets 0.15 / 0.20 / 0.25, goals met."""
    assert main(["--response", "paper", "--tpe-seeds", "1"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^full \(paper, Llama-3\.1-8B\)\s+(0\.\d+)\s+(\d+)\s", out, re.M)
    assert rows == [("0.1500", "4"), ("0.2000", "4"), ("0.2500", "6")]
    assert "goal ≤ 6 trials per variant: met (worst 6)" in out
