"""Net compute skip (``hero.model.flops.net_compute``): by hand, from a model, in a record, and in analysis."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from conftest import MICRO_RETAIN, compose_train, small_llama_config
from transformers import LlamaForCausalLM

import hero
from analysis.compute import markdown, record_net_compute, rows
from analysis.report import build_parser, run_report
from hero.methods.skipgpt_rt import SkipGPTRT
from hero.model import RouterConfig, flops
from hero.pipeline import run

TOY = flops.Shape(hidden=8, layers=2, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=10)


def test_net_compute_by_hand():
    # backbone per token at T = 5 (3 keys on average): 2 x (384 + 768) + 2 x (2*2*2*4*3 = 96) + 160
    b = flops.backbone_flops_per_token(TOY, 5)
    assert b["mean_keys"] == 3 and b["attention_core"] == 192 and b["total"] == 2 * 1152 + 192 + 160 == 2656
    # layer 1 skips 50 %, layer 2 25 %: 0.75 FFNs saved (576), 0.75 adapters of width 2 (48), router 100 + 50
    net = flops.net_compute(TOY, {"0": 0.5, "1": 0.75}, [100, 50], 2, 5)
    assert net["compute"]["ffn_saved"] == 0.75 * 768 == 576
    assert net["compute"]["adapter"] == 0.75 * 64 == 48
    assert net["net_compute_rate"] == pytest.approx((576 - 150 - 48) / 2656)
    assert flops.net_compute(TOY, {"0": 0.5, "1": 0.75}, [0, 0], None, 5)["net_compute_rate"] == pytest.approx(
        576 / 2656
    )
    # SkipGPT-RT: RMS norm (3d) + Linear(d, 2) with bias; the official MLP router is wider
    assert flops.skipgpt_router_flops(TOY) == 24 + 32 + 2
    assert flops.skipgpt_router_flops(TOY, hidden=2) == 24 + 32 + 2 + 8 + 2


def test_model_costs_come_from_the_attached_router_and_adapters():
    model = hero.attach(LlamaForCausalLM(small_llama_config()), "second_half")
    s = flops.Shape.from_config(model.config)
    config = RouterConfig()
    assert flops.model_router_flops(model, s) == [flops.router_flops(s, config, j, 3) for j in (1, 2, 3)]
    assert flops.model_adapter_dim(model) == config.resolved_adapter_dim(64) == 14
    cfg = compose_train(["method=skipgpt_rt", "method.target_ratio=0.5"])
    skipgpt = SkipGPTRT().prepare(cfg, LlamaForCausalLM(small_llama_config()), None, [3, 4, 5], None, 0.0).model
    assert flops.model_router_flops(skipgpt, s) == [3 * 64 + 2 * 64 * 2 + 2] * 3
    assert flops.model_adapter_dim(skipgpt) is None


def test_a_routed_record_carries_its_net_compute_and_analysis_reads_it(micro_overrides, tmp_path):
    run(compose_train([*micro_overrides, MICRO_RETAIN, "alpha=0.05", "trainer.lr=3e-2"]), run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    skip, compute = record["skip"], record["skip"]["compute"]
    assert compute["context_length"] == record["config"]["data"]["max_length"]
    expected = (compute["ffn_saved"] - compute["router"] - compute["adapter"]) / compute["backbone"]["total"]
    assert skip["net_compute_rate"] == pytest.approx(expected)
    assert compute["router"] > 0 and skip["net_compute_rate"] < skip["param_rate"]
    # the same number from the record alone (what analysis does for a record that predates the field)
    shape = SimpleNamespace(**compute["shape"])
    again = record_net_compute(record, flops.Shape(**vars(shape)), context_length=compute["context_length"])
    assert again["net_compute_rate"] == pytest.approx(skip["net_compute_rate"], rel=1e-12)
    table = rows([tmp_path / "run"])
    assert len(table) == 1 and table[0]["net_compute"] == skip["net_compute_rate"]
    assert "net compute skip" in markdown(table)
    # the report draws its curves against it when asked; the default stays the parameter skip
    out = {}
    for axis in ("param", "net_compute"):
        args = build_parser().parse_args(
            [str(tmp_path / "run"), str(tmp_path / "outputs"), "--out", str(tmp_path / axis), "--no-plots"]
            + ["--skip-axis", axis]
        )
        summary = run_report(args)
        out[axis] = summary
        groups = (tmp_path / axis / "groups.csv").read_text()
        assert "skip.mean" in groups
    assert "skip_axis" not in out["param"] and out["net_compute"]["skip_axis"] == "net_compute"
    import polars as pl

    for axis, value in (("param", skip["param_rate"]), ("net_compute", skip["net_compute_rate"])):
        groups = pl.read_csv(tmp_path / axis / "groups.csv").filter(pl.col("method") == "hero")
        assert groups["skip.mean"][0] == pytest.approx(100 * value), axis
