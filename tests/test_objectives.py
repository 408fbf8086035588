"""The skip meter's record section (``hero.objectives.SkipMeter.result``) against a hand count, field by field.

The routing is constructed (``BlockRecord``s with chosen gates and executions), so every number of the ``skip``
section — the parameter skip, its per-token quantiles and histogram, the ceiling, the per-layer rates and gates —
has an independent expected value. Eq 18 and the model-level statistics are in ``test_core.py``.
"""

from __future__ import annotations

import pytest
import torch
from conftest import small_llama

import hero
from hero.model.block import BlockRecord
from hero.objectives import HISTOGRAM_BINS, QUANTILES, SkipMeter, learned_rho


@pytest.fixture(scope="module")
def model():
    return hero.attach(small_llama(), "second_half")  # 6 layers: routable 3, 4, 5


def test_the_skip_section_is_a_hand_count_of_a_constructed_routing(model):
    meter = SkipMeter(model)
    ffn = meter.ffn_params[3]
    assert meter.layers == [3, 4, 5] and meter.ffn_params == {3: ffn, 4: ffn, 5: ffn}
    total = meter.total_params
    # one batch, 4 positions, the last one padding; layer 3 skips tokens 0 and 1, layer 4 token 0, layer 5 none
    executed = {3: [False, False, True, False], 4: [False, True, True, True], 5: [True, True, True, True]}
    gates = {3: [0.1, 0.2, 0.9, 0.0], 4: [0.3, 0.6, 0.8, 0.0], 5: [0.7, 0.7, 0.5, 0.0]}
    records = [BlockRecord(layer, torch.tensor([gates[layer]]), torch.tensor([executed[layer]])) for layer in (3, 4, 5)]
    meter.update(records, torch.tensor([[True, True, True, False]]))
    out = meter.result()
    per_token = [2 * ffn / total, ffn / total, 0.0]  # FFN parameters bypassed by tokens 0, 1, 2
    ceiling = 3 * ffn / total
    assert out["param_rate"] == pytest.approx(sum(per_token) / 3)
    assert out["ffn_execution_rate"] == pytest.approx(6 / 9)
    assert out["max_param_rate"] == pytest.approx(ceiling) and out["tokens"] == 3
    assert out["per_layer_ffn_rate"] == pytest.approx({"3": 1 / 3, "4": 2 / 3, "5": 1.0})
    assert out["per_layer_mean_gate"] == pytest.approx({"3": 1.2 / 3, "4": 1.7 / 3, "5": 1.9 / 3})
    assert out["per_layer_executed_gate"] == pytest.approx({"3": 0.9, "4": 0.7, "5": 1.9 / 3})
    expected_q = torch.quantile(
        torch.tensor(per_token, dtype=torch.float64), torch.tensor(QUANTILES, dtype=torch.float64)
    )
    assert set(out["per_token"]) == {"quantiles", "histogram"}
    assert out["per_token"]["quantiles"] == pytest.approx({str(q): float(v) for q, v in zip(QUANTILES, expected_q)})
    histogram = out["per_token"]["histogram"]
    assert set(histogram) == {"edges", "counts"} and len(histogram["edges"]) == HISTOGRAM_BINS + 1 == 21
    assert histogram["edges"][0] == 0.0 and histogram["edges"][-1] == pytest.approx(ceiling)
    counts = [0.0] * HISTOGRAM_BINS
    for rate in per_token:  # 0 in the first bin, 1/3 of the ceiling in bin 6, 2/3 in bin 13
        counts[min(int(rate / ceiling * HISTOGRAM_BINS), HISTOGRAM_BINS - 1)] += 1
    assert histogram["counts"] == counts and counts[0] == counts[6] == counts[13] == 1


def test_a_meter_that_saw_no_token_says_so_instead_of_inventing_rates(model):
    out = SkipMeter(model).result()
    assert out["tokens"] == 0 and out["per_token"]["quantiles"] == {}
    assert out["per_token"]["histogram"]["counts"] == [0.0] * HISTOGRAM_BINS
    assert out["per_layer_ffn_rate"] == {"3": 0.0, "4": 0.0, "5": 0.0}
    assert out["param_rate"] != out["param_rate"]  # nan: no token, no rate


def test_learned_rho_is_named_by_backbone_layer(model):
    assert learned_rho(model) == pytest.approx({"3": 0.98, "4": 0.98, "5": 0.98})


def test_the_meter_accumulates_over_batches(model):
    """Two batches count as one of their concatenation (the meter adds, it does not keep the last batch)."""
    one, two = SkipMeter(model), SkipMeter(model)
    rows = [[True, False, True], [False, False, True], [True, True, True]]
    batches = [
        [
            BlockRecord(layer, torch.tensor([[0.9, 0.1, 0.8]]), torch.tensor([rows[i]]))
            for i, layer in enumerate((3, 4, 5))
        ]
    ]
    batches.append(
        [BlockRecord(layer, torch.tensor([[0.2, 0.7]]), torch.tensor([[False, True]])) for layer in (3, 4, 5)]
    )
    for records in batches:
        one.update(records, torch.ones(records[0].gate.shape, dtype=torch.bool))
    joined = [
        BlockRecord(a.layer, torch.cat([a.gate, b.gate], 1), torch.cat([a.ffn_executed, b.ffn_executed], 1))
        for a, b in zip(*batches)
    ]
    two.update(joined, torch.ones(1, 5, dtype=torch.bool))
    a, b = one.result(), two.result()  # the gate sums differ in float order only
    assert a["tokens"] == b["tokens"] == 5 and a["per_layer_ffn_rate"] == b["per_layer_ffn_rate"]
    assert a["per_layer_ffn_rate"] == pytest.approx({"3": 3 / 5, "4": 2 / 5, "5": 4 / 5})
    assert a["param_rate"] == pytest.approx(b["param_rate"]) and a["per_token"] == b["per_token"]
    for key in ("per_layer_mean_gate", "per_layer_executed_gate"):
        assert a[key] == pytest.approx(b[key], rel=1e-6)


def test_prediction_positions_leave_out_padding_and_ignored_labels():
    from hero.objectives import prediction_positions

    mask = torch.tensor([[1, 1, 1, 1, 0]])
    labels = torch.tensor([[5, -100, 7, 8, -100]])
    # position t predicts t + 1: t = 0 predicts an ignored label, t = 3 predicts padding, t = 4 predicts nothing
    assert prediction_positions(mask).tolist() == [[True, True, True, False, False]]
    assert prediction_positions(mask, labels).tolist() == [[False, True, True, False, False]]


def test_eq18_over_a_single_valid_position_is_that_positions_square():
    from hero.objectives import skip_loss

    gates = [torch.tensor([[0.5, 0.9]]), torch.tensor([[0.25, 0.9]])]
    assert skip_loss(gates, torch.tensor([[True, False]])).item() == pytest.approx(0.75**2)


def test_the_backbone_count_counts_a_tied_matrix_once_and_no_router_parameter():
    from hero.objectives import total_param_count

    tied = hero.attach(small_llama(tie_word_embeddings=True), "second_half")
    untied = small_llama()
    expected = sum(p.numel() for p in untied.parameters()) - untied.lm_head.weight.numel()
    assert total_param_count(tied) == expected


def test_the_meters_sums_are_float64_across_batches(model):
    """A gate of 1 and then one of 1e-8: in float32 their sum is 1, in float64 1 + 1e-8 (a run's meter sees
    thousands of batches, where float32 sums drift)."""
    meter = SkipMeter(model)
    for gate in (1.0, 1e-8):
        records = [BlockRecord(layer, torch.tensor([[gate]]), torch.tensor([[True]])) for layer in (3, 4, 5)]
        meter.update(records, torch.tensor([[True]]))
    tiny = float(torch.tensor(1e-8))  # the float32 value the gate holds
    out = meter.result()
    assert out["per_layer_mean_gate"]["3"] == pytest.approx((1.0 + tiny) / 2, rel=1e-12, abs=0)
    assert out["per_layer_executed_gate"]["3"] == pytest.approx((1.0 + tiny) / 2, rel=1e-12, abs=0)
