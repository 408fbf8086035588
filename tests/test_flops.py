"""Net compute skip (``hero.model.flops.net_compute``): by hand, from a model, in a record, and in analysis."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from conftest import MICRO_RETAIN, compose_train, small_llama_config
from transformers import LlamaForCausalLM

from analysis.compute import markdown, record_net_compute, rows
from analysis.report import build_parser, run_report
from hero.model import flops, routed_blocks
from hero.pipeline import run
from hero.spec import RunSpec

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


def test_each_method_states_the_cost_of_the_router_and_adapters_it_attaches():
    """``Method.compute_cost`` reads the resolved config; the widths it charges are the ones the model was built with."""
    s = flops.Shape.from_config(small_llama_config())
    for overrides in ([], ["ablation=param_matched_local"]):
        spec = RunSpec.resolve(compose_train(["layers=explicit", "layers.indices=[3,4,5]", *overrides]))
        model = spec.method.prepare(spec, LlamaForCausalLM(small_llama_config()), None, [3, 4, 5], None).model
        built = model.hero_router.config  # local_head_hidden="matched" resolved to a width by the router
        router, adapter = spec.method.compute_cost(spec.resolved, s, 3)
        assert router == [flops.router_flops(s, built, j, 3) for j in (1, 2, 3)]
        assert adapter == routed_blocks(model)[0].adapter.W1.out_features == 14
    for router_option, hidden in (("linear", None), ("mlp", 16)):
        spec = RunSpec.resolve(
            compose_train(["method=skipgpt_rt", "method.target_ratio=0.5", f"method.router={router_option}"])
        )
        model = spec.method.prepare(spec, LlamaForCausalLM(small_llama_config()), None, [3, 4, 5], None).model
        if hidden is not None:
            assert model.hero_router.routers[0].hidden.out_features == hidden
        assert spec.method.compute_cost(spec.resolved, s, 3) == ([flops.skipgpt_router_flops(s, hidden)] * 3, None)
    assert flops.skipgpt_router_flops(s, 16) > flops.skipgpt_router_flops(s) == 3 * 64 + 2 * 64 * 2 + 2
    for method, adapter in (("random_skip", 14), ("dense", None), ("lora", None), ("drop_routable_ffn", None)):
        spec = RunSpec.resolve(compose_train([f"method={method}"]))
        assert spec.method.compute_cost(spec.resolved, s, 3) == ([0, 0, 0], adapter), method


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


def test_every_method_records_its_net_compute_and_analysis_reprices_it_from_the_method(micro_overrides, tmp_path):
    """Two wrong results this guards: the report's net compute axis dropped the drop control (it carried no
    net compute and was not on a list of unrouted methods), and ``analysis.compute`` priced the official
    SkipGPT-RT MLP router as the linear one whenever it recomputed (``--context-length``)."""
    from analysis.load import load_runs
    from analysis.report import net_compute_axis

    records = {}
    for name in ("drop_routable_ffn", "skipgpt_rt_official", "lora"):
        overrides = [*micro_overrides, MICRO_RETAIN, f"method={name}"]
        run(
            compose_train(overrides + (["method.target_ratio=0.3"] if "skipgpt" in name else [])),
            run_dir=tmp_path / name,
        )
        records[name] = json.loads((tmp_path / name / "results.json").read_text())
    drop, official, lora = records["drop_routable_ffn"], records["skipgpt_rt_official"], records["lora"]
    assert drop["skip"]["net_compute_rate"] == pytest.approx(drop["skip"]["compute"]["ffn_saved_share"])
    assert drop["skip"]["net_compute_rate"] > 0
    assert lora["skip"]["net_compute_rate"] == 0.0
    compute = official["skip"]["compute"]
    shape = flops.Shape(**compute["shape"])
    hidden = shape.hidden // 4  # the official router: Linear(d, d/4) + ReLU + Linear(d/4, 2)
    assert compute["router"] == len(official["routable_layers"]) * flops.skipgpt_router_flops(shape, hidden)
    again = record_net_compute(official, shape, context_length=compute["context_length"])
    assert again["net_compute_rate"] == pytest.approx(official["skip"]["net_compute_rate"], rel=1e-12)
    frame = load_runs([tmp_path / name for name in records]).records.collect()
    kept, note = net_compute_axis(frame)
    by_method = dict(zip(kept["method"].to_list(), kept["skip.param_rate"].to_list()))
    assert by_method["drop_routable_ffn"] == pytest.approx(drop["skip"]["net_compute_rate"])
    assert "left out" not in note
    # a record written before every method carried it: a method without a router that ran every FFN is free
    old = {k: v for k, v in lora["skip"].items() if k not in ("net_compute_rate", "compute")}
    (tmp_path / "old" / "lora").mkdir(parents=True)
    (tmp_path / "old" / "lora" / "results.json").write_text(json.dumps({**lora, "skip": old}))
    kept, note = net_compute_axis(load_runs([tmp_path / "old"]).records.collect())
    assert kept["skip.param_rate"].to_list() == [0.0] and "left out" not in note


def test_the_compute_section_field_by_field():
    """Every field of ``skip.compute`` as a record stores it (analysis and the studies' tables read them by name)."""
    net = flops.net_compute(TOY, {"0": 0.5, "1": 0.75}, [100, 50], 2, 5)
    total = 2656
    assert net == {
        "net_compute_rate": pytest.approx((576 - 150 - 48) / total),
        "compute": {
            "unit": "FLOPs per token (1 multiply-add = 2)",
            "context_length": 5,
            "shape": {
                "hidden": 8,
                "layers": 2,
                "heads": 2,
                "kv_heads": 1,
                "head_dim": 4,
                "intermediate": 16,
                "vocab": 10,
            },
            "backbone": {
                "attention_proj": 2 * 384,
                "attention_core": 192,
                "ffn": 2 * 768,
                "lm_head": 160,
                "total": total,
                "mean_keys": 3,
            },
            "ffn_saved": 576,
            "router": 150,
            "adapter": 48,
            "router_share": pytest.approx(150 / total),
            "adapter_share": pytest.approx(48 / total),
            "ffn_saved_share": pytest.approx(576 / total),
        },
    }


def test_shape_reads_head_dim_and_kv_heads_where_a_config_has_them_and_defaults_where_not():
    given = SimpleNamespace(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # wider than hidden / heads (as Gemma's)
        intermediate_size=96,
        vocab_size=50,
    )
    assert flops.Shape.from_config(given) == flops.Shape(64, 2, 4, 2, 32, 96, 50)
    bare = SimpleNamespace(**{k: v for k, v in vars(given).items() if k not in ("head_dim", "num_key_value_heads")})
    assert flops.Shape.from_config(bare) == flops.Shape(64, 2, 4, 4, 16, 96, 50)
    assert type(flops.Shape.from_config(bare).head_dim) is int  # a record's compute.shape stores 16, not 16.0


def test_a_local_head_of_its_own_width_is_charged_at_that_width():
    from hero.model import RouterConfig

    s = flops.Shape(64, 6, 4, 2, 16, 160, 97)
    default, narrow = RouterConfig(), RouterConfig(local_head_hidden=7)
    assert flops.router_flops(s, default, 2, 3) - flops.router_flops(s, narrow, 2, 3) == 2 * (64 + 1) * (256 - 7)
