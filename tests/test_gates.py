"""analysis.gates: the executed-only gate and the FFN execution rate, stored or recovered from older records."""

from __future__ import annotations

import json
import random

import pytest
from conftest import REPO

from analysis.gates import Gate, GateHistogramError, executed_gate, ffn_execution_rate, markdown, summary

STUDY = REPO / "docs" / "studies" / "router_memory_smollm2" / "records"
EDGES = [i / 20 for i in range(21)]


def _skip_from_gates(per_layer: dict[str, list[float]], tau: float = 0.5) -> dict:
    """A record's skip section as SkipMeter and GateHistogram write it, from known gates (FFN runs iff g ≥ τ)."""
    tokens = len(next(iter(per_layer.values())))
    hist = {
        layer: {
            "edges": EDGES,
            "counts": [
                sum(1 for g in gates if lo <= g < hi or (hi == 1.0 and g == 1.0)) for lo, hi in zip(EDGES, EDGES[1:])
            ],
        }
        for layer, gates in per_layer.items()
    }
    return {
        "param_rate": 0.1,
        "tokens": tokens,
        "gate_histogram": hist,
        "per_layer_ffn_rate": {layer: sum(g >= tau for g in gates) / tokens for layer, gates in per_layer.items()},
        "per_layer_mean_gate": {layer: sum(gates) / tokens for layer, gates in per_layer.items()},
    }


def test_histogram_bounds_hold_the_true_executed_gate_and_differ_from_the_mean_over_all_tokens():
    rng = random.Random(0)
    per_layer = {str(layer): [rng.random() ** 0.3 for _ in range(500)] for layer in (4, 5, 6)}
    skip = _skip_from_gates(per_layer)
    for layer, gates in per_layer.items():
        executed = [g for g in gates if g >= 0.5]
        true = sum(executed) / len(executed)
        gate = executed_gate(skip)[layer]
        assert gate.low <= gate.mid <= gate.high and gate.low <= true <= gate.high
        assert gate.high - gate.low <= 0.05
        assert skip["per_layer_mean_gate"][layer] < gate.low  # the mean over all tokens counts the skipped ones
    assert ffn_execution_rate(skip) == pytest.approx(
        sum(g >= 0.5 for gates in per_layer.values() for g in gates) / 1500
    )


def test_a_hard_gate_is_bounded_at_one_and_stored_values_win_over_the_histogram():
    skip = _skip_from_gates({"3": [1.0] * 30 + [0.0] * 10})
    assert executed_gate(skip)["3"].high == 1.0 and executed_gate(skip)["3"].low > 0.98
    skip["per_layer_executed_gate"], skip["ffn_execution_rate"] = {"3": 0.9}, 0.5
    assert executed_gate(skip) == {"3": Gate(0.9, 0.9, 0.9)} and ffn_execution_rate(skip) == 0.5


def test_a_layer_not_executed_by_g_at_least_tau_gets_no_estimate_and_tau_must_be_a_bin_edge():
    skip = _skip_from_gates({"3": [0.9] * 10})
    skip["per_layer_ffn_rate"]["3"] = 0.5  # a policy that skipped half of these tokens at g = 0.9
    assert executed_gate(skip) == {"3": None}
    with pytest.raises(GateHistogramError, match=r"tau=0.52: not an edge .* allowed: 0.05, 0.1"):
        executed_gate(skip, tau=0.52)


def test_the_committed_smollm2_records_give_the_published_corrected_numbers():
    """docs/smollm2 and the study README quote these: executed-only gate vs mean gate, FFN calls vs parameters."""
    for seed in (42, 43, 44):
        s = summary(json.loads((STUDY / f"hero-full-calibrated-s{seed}" / "results.json").read_text()))
        run = s["executed_gate_run"]
        assert 0.89 < run.low <= run.high < 0.93
        assert 0.86 < min(g.low for g in s["executed_gate"].values())
        assert min(s["mean_gate_all_tokens"].values()) < 0.72  # what the old README called the executed gate
        assert 0.78 < s["ffn_execution_rate"] < 0.84 and 0.93 < s["param_share_used"] < 0.96
    table = markdown([STUDY / "hero-full-calibrated-s42"])
    assert "| hero-full-calibrated-s42 | 6.27 % | 93.7 % | 78.8 % (0.732–0.854) |" in table
    with_layers = markdown([STUDY / "skipgpt_rt-calibrated-s42"], layers=(16, 29))
    header, _, row = with_layers.splitlines()
    assert header.endswith("| layer 16 FFN rate | layer 29 FFN rate |")
    rates = json.loads((STUDY / "skipgpt_rt-calibrated-s42" / "results.json").read_text())["skip"]["per_layer_ffn_rate"]
    assert row.endswith(f"| {100 * rates['16']:.1f} % | {100 * rates['29']:.1f} % |")
