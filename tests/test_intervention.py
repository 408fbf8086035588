"""Evaluation-only interventions (``hero.model.intervention``) and ``forced_routing``'s gate modes."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MICRO_RETAIN, SMALL, compose_train, trained_looking
from omegaconf import OmegaConf

import hero
from hero.errors import ConfigError
from hero.model.intervention import Intervention, apply_intervention, intervened
from hero.pipeline import run
from hero.rescore import rescore
from hero.results import config_hash
from hero.spec import check


def batch(seed: int = 2):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, SMALL["vocab_size"], (3, 12), generator=gen), torch.ones(3, 12, dtype=torch.long)


@torch.no_grad()
def h_out_by_layer(model) -> dict[int, dict]:
    """Per routable layer: the trace's h̄, u, gate, executed mask and h_out, shaped (N, ...)."""
    out = {}
    for r in hero.routing_trace(model, *batch()):
        out[r["layer"]] = {
            k: r[k].reshape(-1, *r[k].shape[2:]) for k in ("h_bar", "u", "gate", "ffn_executed", "h_out")
        }
    return out


def eq3(block, hbar, u, g, executed, adapter=True):
    skip = (1 - g).unsqueeze(-1) * block.adapter(u) if adapter else torch.zeros_like(u)
    return torch.where(executed.unsqueeze(-1), hbar + g.unsqueeze(-1) * block.base_layer.mlp(u), hbar + skip)


@pytest.mark.parametrize(
    "intervention",
    [Intervention(unscaled=True), Intervention(identity_adapter=True), Intervention(force_execute=(4,))],
    ids=lambda i: i.suffix,
)
def test_each_intervention_computes_its_rule_and_leaves_the_default_unchanged(intervention):
    model = trained_looking()
    blocks = {b.layer: b for b in hero.routed_blocks(model)}
    before = h_out_by_layer(model)
    assert any(0 < int(r["ffn_executed"].sum()) < r["ffn_executed"].numel() for r in before.values())
    with intervened(model, intervention):
        during = h_out_by_layer(model)
    after = h_out_by_layer(model)
    for layer, t in during.items():
        assert torch.equal(after[layer]["h_out"], before[layer]["h_out"])  # the context restores the model
        block, g, executed = blocks[layer], t["gate"], t["ffn_executed"]
        forced = layer in intervention.force_execute
        assert bool(executed.all()) if forced else torch.equal(executed, g >= 0.5)
        scaled = torch.where(executed, torch.ones_like(g), g) if intervention.unscaled or forced else g
        with torch.no_grad():
            expected = eq3(block, t["h_bar"], t["u"], scaled, executed, adapter=not intervention.identity_adapter)
        torch.testing.assert_close(t["h_out"], expected, rtol=1e-5, atol=1e-5)
    # the intervention changed what the model computes, and the record keeps the router's own gate
    assert any(not torch.allclose(during[layer]["h_out"], before[layer]["h_out"]) for layer in during)
    with torch.no_grad():
        logits = model(*batch()).logits
        with intervened(model, intervention):
            assert not torch.allclose(model(*batch()).logits, logits)


def test_forced_routing_gate_modes():
    model = trained_looking()
    blocks = {b.layer: b for b in hero.routed_blocks(model)}
    flip = lambda j, g: g < 0.5  # noqa: E731 - every row does what the router did not choose
    for mode in ("router", "forced", "one"):
        with hero.forced_routing(model, flip, gate=mode):
            trace = h_out_by_layer(model)
        for layer, t in trace.items():
            g, executed = t["gate"], t["ffn_executed"]
            assert torch.equal(executed, g < 0.5)
            applied = {
                "router": g,
                "forced": executed.to(g.dtype),  # every row is forced here: hard gates
                "one": torch.where(executed, torch.ones_like(g), g),
            }[mode]
            with torch.no_grad():
                expected = eq3(blocks[layer], t["h_bar"], t["u"], applied, executed)
            torch.testing.assert_close(t["h_out"], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="allowed values are router, forced, one"):
        with hero.forced_routing(model, flip, gate="unit"):
            pass


def test_bad_intervention_values_fail_in_one_line():
    with pytest.raises(ConfigError, match=r"intervention.force_execute=\['x'\]"):
        check(compose_train(["intervention.force_execute=[x]"]))
    with pytest.raises(ConfigError, match="intervention.unscaled='yes'"):
        check(compose_train(["intervention.unscaled=yes"]))
    with pytest.raises(ConfigError, match=r"layer\(s\) \[1\] are not routable"):
        apply_intervention(trained_looking(), Intervention(force_execute=(1,)))


def test_interventions_at_default_leave_the_config_hash_as_before():
    cfg = OmegaConf.to_container(compose_train([]), resolve=True)
    assert cfg["intervention"] == {"force_execute": [], "unscaled": False, "identity_adapter": False}
    without = {k: v for k, v in cfg.items() if k != "intervention"}
    assert config_hash(cfg) == config_hash(without)
    for override in ("intervention.unscaled=true", "intervention.force_execute=[5]"):
        other = OmegaConf.to_container(compose_train([override]), resolve=True)
        assert config_hash(other) != config_hash(cfg), override


def test_intervention_from_train_and_from_rescore_on_the_micro_bed(micro_overrides, tmp_path):
    """train.py with an intervention scores the trained model under it (variant suffix, forced layer at 1.0);
    rescoring the plain run with the same intervention gives the same scores; the plain run is unchanged."""
    base = [*micro_overrides, MICRO_RETAIN, "trainer.lr=3e-2"]
    run(compose_train(base), run_dir=tmp_path / "plain")
    plain = json.loads((tmp_path / "plain" / "results.json").read_text())
    layer = plain["routable_layers"][-1]
    forced = [*base, f"intervention.force_execute=[{layer}]", "intervention.unscaled=true"]
    run(compose_train(forced), run_dir=tmp_path / "forced")
    record = json.loads((tmp_path / "forced" / "results.json").read_text())
    assert record["variant"] == f"full@force{layer}-unscaled" and plain["variant"] == "full"
    assert record["config_hash"] != plain["config_hash"]
    assert record["skip"]["per_layer_ffn_rate"][str(layer)] == 1.0
    assert record["train"]["final_loss"] == plain["train"]["final_loss"]  # evaluation only
    assert record["eval"] != plain["eval"]
    path = rescore(tmp_path / "plain", [f"intervention.force_execute=[{layer}]", "intervention.unscaled=true"])
    again = json.loads(path.read_text())
    assert path.parent.name.endswith(f"@force{layer}-unscaled") and again["variant"] == record["variant"]
    for task, metrics in record["eval"].items():
        assert again["eval"][task] == pytest.approx(metrics, rel=1e-6), task
    assert again["skip"]["per_layer_ffn_rate"] == record["skip"]["per_layer_ffn_rate"]
    same = json.loads(rescore(tmp_path / "plain", []).read_text())
    assert same["variant"] == "full"
    for task, metrics in plain["eval"].items():
        assert same["eval"][task] == pytest.approx(metrics, rel=1e-6), task
