"""hero.scoring: per-item outputs beside every scored record and scoring at several evaluation thresholds."""

from __future__ import annotations

import json

import polars as pl
import pytest
import torch
from conftest import MICRO_RETAIN, compose_train

from analysis.items import item_frame, task_values
from hero.errors import ConfigError
from hero.pipeline import run
from hero.rescore import rescore
from hero.results import ITEMS_FILENAME, read_items

pytestmark = pytest.mark.testbed


@pytest.fixture
def curved_run(micro_overrides, tmp_path):
    """A micro HeRo run scored at its trained τ (0.5) and at τ = 0.2 and 0.999 (``eval.thresholds``)."""
    overrides = [
        *micro_overrides,
        MICRO_RETAIN,
        "trainer.lr=3e-2",
        "trainer.num_threads=1",
        "eval.thresholds=[0.2,0.999]",
    ]
    threads = torch.get_num_threads()
    try:
        run(compose_train(overrides), run_dir=tmp_path / "run")
    finally:
        torch.set_num_threads(threads)
    return tmp_path / "run" / "results.json"


def test_items_give_back_every_task_value_and_the_curve_moves_with_the_threshold(curved_run):
    """Mutants killed: items of another threshold mixed into the trained point's rows; ``set_threshold`` ignored
    (every curve point would equal the trained one); the trained τ not restored after the curve (the record's own
    scores are taken first, so the check is on the routing statistics of a rescoring below)."""
    record = json.loads(curved_run.read_text())
    frame = item_frame(curved_run, derived=False)
    trained = task_values(frame.filter(pl.col("threshold").is_null()))
    for task, metric in record["eval_meta"]["primary_metric"].items():
        assert trained[task] == pytest.approx(record["eval"][task][metric], rel=1e-12), task
    rows = read_items(curved_run.parent / ITEMS_FILENAME)
    tasks = set(record["eval"])
    assert {r["task"] for r in rows} == tasks  # every task, diagnostics included
    curve = {p["threshold"]: p for p in record["curve"]}
    assert set(curve) == {0.2, 0.999}
    for threshold, point in curve.items():
        values = task_values(frame.filter(pl.col("threshold") == threshold))
        for task, metric in record["eval_meta"]["primary_metric"].items():
            assert values[task] == pytest.approx(point["eval"][task][metric], rel=1e-12)
    # a higher τ skips more: HeRo runs a token's FFN only where g ≥ τ
    assert curve[0.2]["skip"]["param_rate"] <= record["skip"]["param_rate"] < curve[0.999]["skip"]["param_rate"]
    assert curve[0.999]["skip"]["net_compute_rate"] > record["skip"]["net_compute_rate"]
    baseline = next(curved_run.parents[1].glob(f"outputs/baselines/*/{ITEMS_FILENAME}"), None)
    assert baseline is not None  # the dense record keeps its items too


def test_rescoring_keeps_items_and_routes_at_the_trained_threshold(curved_run):
    path = rescore(curved_run.parent, ["eval=tiny", MICRO_RETAIN])
    again, original = json.loads(path.read_text()), json.loads(curved_run.read_text())
    assert (path.parent / ITEMS_FILENAME).is_file()
    assert "curve" not in again  # eval.thresholds is not carried over unless asked
    assert again["skip"]["param_rate"] == pytest.approx(original["skip"]["param_rate"])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["method=dense", "eval.thresholds=[0.4]"], "method=dense has no evaluation threshold"),
        (["eval.thresholds=[0.4,1.2]"], "must be null or a list of distinct numbers in (0, 1)"),
        (["eval.thresholds=[0.4,0.4]"], "distinct"),
        (["eval.thresholds=0.4"], "must be null or a list"),
    ],
)
def test_bad_thresholds_are_refused_before_any_compute(overrides, message):
    from hero.spec import RunSpec

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunSpec.resolve(compose_train(overrides))


def test_skipgpt_rt_threshold_half_is_its_argmax_and_a_higher_one_executes_fewer_tokens():
    """Mutants killed: the logit of t with the wrong sign; ≥ in place of > at t = 0.5 (ties would execute)."""
    from hero.methods.skipgpt_rt import SkipGPTRouter
    from hero.model.policy import PolicyConfig

    torch.manual_seed(0)
    router = SkipGPTRouter(16, 2, PolicyConfig("skipgpt_rt", (), False, None), temperature=1.0, bias_init=0.0).eval()
    with torch.no_grad():
        for head in router.routers:
            head.weight.normal_(0.0, 1.0)
        router.routers[0].bias.zero_()
    hbar = torch.randn(512, 16)
    logits = router.logits(1, hbar)
    argmax = (logits[:, 1] > logits[:, 0]).float()
    assert torch.equal(router.step(1, hbar, None, None)[0].gate, argmax)
    router.eval_threshold = 0.8
    high = router.step(1, hbar, None, None)[0].gate
    assert high.sum() < argmax.sum() and bool((high <= argmax).all())
    expected = (torch.softmax(logits, -1)[:, 1] > 0.8).float()
    assert (high != expected).float().mean() < 0.01  # equal up to float rounding at the boundary
    with torch.no_grad():
        router.routers[0].weight.zero_()  # every margin exactly 0: a tie executes nothing at t = 0.5, as argmax
    router.eval_threshold = 0.5
    assert router.step(1, hbar, None, None)[0].gate.sum() == 0
