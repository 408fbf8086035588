"""``python -m hero.rescore``: a finished run is scored again from the trained tensors kept beside its record."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MICRO_RETAIN, compose_train

from hero.errors import ConfigError
from hero.pipeline import run
from hero.rescore import main, rescore


@pytest.mark.parametrize("method", ["hero", "lora"])
def test_rescoring_on_the_same_suite_reproduces_the_scores_and_records_its_origin(method, micro_overrides, tmp_path):
    overrides = [*micro_overrides, MICRO_RETAIN, f"method={method}", "trainer.lr=3e-2", "trainer.num_threads=1"]
    threads = torch.get_num_threads()
    try:  # the run and the rescoring both set the process's threads: put them back for the next test
        run(compose_train(overrides), run_dir=tmp_path / "run")
        original = json.loads((tmp_path / "run" / "results.json").read_text())
        state = "router/hero_router.safetensors" if method == "hero" else "trained/trainable.safetensors"
        assert (tmp_path / "run" / state).is_file()
        torch.set_num_threads(2)  # a fresh process's default on a 2-core machine
        path = rescore(tmp_path / "run", ["eval=tiny", MICRO_RETAIN])
        assert torch.get_num_threads() == 1  # the run's trainer.num_threads, as train.py sets it
    finally:
        torch.set_num_threads(threads)
    again = json.loads(path.read_text())
    assert again["origin"] == "rescored" and again["rescored_from"] == str(tmp_path / "run" / "results.json")
    assert again["eval"].keys() == original["eval"].keys()
    for task, metrics in original["eval"].items():
        assert again["eval"][task] == pytest.approx(metrics, rel=1e-6), task
    assert again["skip"]["param_rate"] == pytest.approx(original["skip"]["param_rate"])
    assert again["retain"]["value"] == pytest.approx(original["retain"]["value"], rel=1e-6)
    assert (path.parents[1] / "baselines").is_dir()  # the suite's dense record sits beside it for analysis


def test_rescoring_without_the_trained_tensors_or_with_another_run_option_fails_in_one_line(
    micro_overrides, tmp_path, capsys
):
    run(compose_train([*micro_overrides, MICRO_RETAIN, "method=lora"]), run_dir=tmp_path / "run")
    assert main([str(tmp_path / "run"), "seed=7"]) == 2
    assert "rescoring changes only the suite" in capsys.readouterr().err
    for f in (tmp_path / "run" / "trained").iterdir():
        f.unlink()
    with pytest.raises(ConfigError, match="no trained lora tensors"):
        rescore(tmp_path / "run", ["eval=tiny", MICRO_RETAIN])
    assert main([str(tmp_path / "nothing")]) == 2
