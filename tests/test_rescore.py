"""``python -m hero.rescore``: a finished run is scored again from the trained tensors kept beside its record."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest
import torch
from conftest import MICRO_RETAIN, compose_train

from hero.errors import ConfigError
from hero.pipeline import run
from hero.rescore import main, rescore, rescore_many, split_arguments


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


def test_rescoring_a_calibrations_trials_into_a_study_checks_every_run_first_and_resumes(
    micro_overrides, tmp_path, capsys, monkeypatch
):
    trials = tmp_path / "trials"
    for alpha in ("0.1", "1.0"):  # named as calibration names its trials: by the knob
        run(compose_train([*micro_overrides, MICRO_RETAIN, f"alpha={alpha}"]), run_dir=trials / f"alpha={alpha}")
    runs = [str(trials / "alpha=0.1"), str(trials / "alpha=1.0")]
    into = tmp_path / "study" / "records"
    assert main([*runs, str(tmp_path / "nothing"), "eval=tiny", MICRO_RETAIN, "--into", str(into)]) == 2
    assert "nothing: no completed run record" in capsys.readouterr().err
    assert not (trials / "alpha=0.1" / "rescored").exists() and not into.exists()  # refused before any compute
    assert main(["eval=tiny"]) == 2 and "no run directory among" in capsys.readouterr().err

    assert main([*runs, "eval=tiny", MICRO_RETAIN, "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert out.count("rescored ") == 2 and "already scored" not in out
    names = sorted(p.name for p in into.iterdir())
    seed = json.loads((trials / "alpha=0.1" / "results.json").read_text())["seed"]
    variant = json.loads((trials / "alpha=0.1" / "results.json").read_text())["variant"]
    assert names == ["baselines", f"hero-{variant}-alpha=0.1-s{seed}", f"hero-{variant}-alpha=1.0-s{seed}"]
    copied = into / f"hero-{variant}-alpha=1.0-s{seed}" / "results.json"
    scored = next((trials / "alpha=1.0" / "rescored").glob("tiny-*/results.json"))
    assert copied.read_text() == scored.read_text()
    assert len(list((into / "baselines").iterdir())) == 1  # the suite's dense record, once

    before = scored.stat().st_mtime_ns
    assert main([*runs, "eval=tiny", MICRO_RETAIN]) == 0  # a relaunch scores nothing again
    assert capsys.readouterr().out.count("already scored") == 2 and scored.stat().st_mtime_ns == before
    # the same suite scored another way (more thresholds) is not "already scored": it replaces that scoring
    assert main([runs[1], "eval=tiny", MICRO_RETAIN, "eval.thresholds=[0.3]"]) == 0
    assert "already scored" not in capsys.readouterr().out
    assert [point["threshold"] for point in json.loads(scored.read_text())["curve"]] == [0.3]

    with open(scored.parent.parent / f"{scored.parent.name}.lock", "w") as held:  # a second process scoring it
        fcntl.flock(held, fcntl.LOCK_EX)
        states = [state for _, _, state in rescore_many([trials / "alpha=1.0"], ["eval=tiny", MICRO_RETAIN])]
    assert states == ["taken"]

    monkeypatch.chdir(trials)  # a trial directory named like an override is still a run
    assert split_arguments(["alpha=0.1", "eval=tiny", "paths.cache=/tmp/x", "other/alpha=2"]) == (
        [Path("alpha=0.1"), Path("other/alpha=2")],
        ["eval=tiny", "paths.cache=/tmp/x"],
    )


@pytest.mark.parametrize("method", ["skipgpt_rt", "random_skip", "static_drop", "dense"])
def test_rescoring_every_method_on_its_own_suite_reproduces_its_record_exactly(method, micro_overrides, tmp_path):
    """What the studies did to SkipGPT-RT runs, for each method: trained (skipgpt_rt; random_skip with its adapters)
    or not (static_drop, dense), then scored again on the same suite with no intervention. The rescoring rebuilds
    the model (prepare, load) and scores it by the code path of the run, so scores, Retain and the skip section are
    equal to the bit, not only to float order."""
    overrides = [*micro_overrides, MICRO_RETAIN, f"method={method}", "trainer.max_steps=2", "trainer.num_threads=1"]
    if method == "random_skip":
        overrides.append("method.adapter=true")
    if method == "skipgpt_rt":  # its routers start near 50 % execution, so that the argmax gate skips some tokens
        overrides.append("method.bias_init=0")
    threads = torch.get_num_threads()
    try:
        run(compose_train(overrides), run_dir=tmp_path / "run")
        path = rescore(tmp_path / "run", ["eval=tiny", MICRO_RETAIN])
    finally:
        torch.set_num_threads(threads)
    original, again = json.loads((tmp_path / "run" / "results.json").read_text()), json.loads(path.read_text())
    assert again["origin"] == "rescored" and again["config"]["eval"] == original["config"]["eval"]
    assert again["config"]["intervention"] == original["config"]["intervention"]
    trains = method in ("skipgpt_rt", "random_skip")
    assert (original["train"] is not None) == trains and again["train"] == original["train"]
    assert again["eval"] and again["skip"]["param_rate"] is not None
    for key in ("eval", "retain", "retain_chance", "skip", "rho", "knob"):
        assert again.get(key) == original.get(key), key
    if method != "dense":
        assert 0 < original["skip"]["param_rate"] < 1


def test_a_studys_copy_of_a_record_stands_for_its_run(micro_overrides, tmp_path, capsys):
    """``hero.rescore docs/studies/<study>/records/<name> … --into DIR``: the run is found through the config-hash
    index, rescored in its own directory (not in the study folder), and the copy keeps the record's name. Mutants
    killed: the copy rescored in place (its folder has no trained tensors), the copy named by the run directory, a
    copy whose run is not indexed accepted (the error must come before any compute, in one line), another suite's
    dense record copied into a study folder beside the one its records name, a copy of a rescoring not traced
    through its ``rescored_from``."""
    run(compose_train([*micro_overrides, MICRO_RETAIN]), run_dir=tmp_path / "run")
    copy = tmp_path / "study" / "records" / "hero-full-s42"
    copy.mkdir(parents=True)
    for name in ("results.json", "items.jsonl.gz"):
        (copy / name).write_bytes((tmp_path / "run" / name).read_bytes())
    into = tmp_path / "study" / "tiny_records"
    assert main([str(copy), "eval=tiny", MICRO_RETAIN, "--into", str(into)]) == 0
    assert next((tmp_path / "run" / "rescored").glob("tiny-*/results.json")).is_file()
    assert not (copy / "rescored").exists()
    assert sorted(p.name for p in into.iterdir()) == ["baselines", "hero-full-s42"]
    other = tmp_path / "study" / "other_records"  # a second suite: its folder gets its own dense record only
    assert main([str(copy), "eval=tiny", MICRO_RETAIN, "eval.limit=5", "--into", str(other)]) == 0
    assert len(list((other / "baselines").iterdir())) == 1 and len(list((into / "baselines").iterdir())) == 1
    # a copy of a rescoring (eval.limit=5: its own config hash, not in the index) stands for the run it rescored
    again = tmp_path / "study" / "again_records"
    assert main([str(other / "hero-full-s42"), "eval=tiny", MICRO_RETAIN, "eval.limit=4", "--into", str(again)]) == 0
    assert (again / "hero-full-s42" / "results.json").is_file() and not (other / "hero-full-s42" / "rescored").exists()
    capsys.readouterr()
    for entry in (tmp_path / "outputs" / "index").iterdir():
        entry.unlink()
    assert main([str(copy), "eval=tiny", MICRO_RETAIN, "--into", str(into)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no trained hero tensors (router/)" in err[0] and not (copy / "rescored").exists()
