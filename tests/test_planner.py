"""The sweep planner (``python -m hero.dispatch plan``, ``hero.dispatch.cost`` / ``budget``) on the paper's backbones,
built on the meta device through the methods' own ``prepare``: parameter counts against the paper's and the
committed records', memory that refuses what does not fit, and bad input in one line. Seconds each, no weights."""

from __future__ import annotations

import pytest

from hero.dispatch import budget, cost
from hero.dispatch.__main__ import main
from hero.dispatch.studies import load_study

PAPER = ["model=llama3_1_8b", "data=tulu3", "trainer=paper", "eval=paper7", "alpha=1e-3"]


@pytest.fixture(scope="module")
def paper_cost():
    return cost.job_cost(cost.compose_job(PAPER), world=4)


def test_llama3_8b_counts_on_the_meta_device(paper_cost):
    """Backbone 8,030,261,248 (Llama-3.1-8B's own count); router + η 2,169,138 for full HeRo on the second half, as
    the studies README measured (kills: a wrong layer set, a router built outside ``method.prepare``, counting
    the adapters as router)."""
    assert paper_cost.backbone_params == 8_030_261_248
    assert paper_cost.router_params == 2_169_138
    assert paper_cost.routable_layers == list(range(16, 32))
    # adapters at d_r = 7/32 · d = 896 per routable layer (eq 2), the rest of what trains
    assert paper_cost.trainable_params - paper_cost.router_params == 16 * 2 * 4096 * 896


def test_param_matched_control_count_is_the_papers():
    """The parameter-matched local control: 2,167,857 router + η parameters (docs/studies/README.md) — built on
    the meta device at its resolved local-head width (kills: ``resolve_matched`` skipped in the planner)."""
    spec = cost.compose_job([*PAPER, "ablation=param_matched_local"])
    c = cost.job_cost(spec, world=4)
    assert c.router_params == 2_167_857


def test_paper_recipe_updates_and_memory(paper_cost):
    """One epoch of Tulu-3 at global batch 128: 7,339 updates (the paper's); bf16 weights 2 bytes each; with
    checkpointing the job fits a 48 GB card, without it it does not (kills: fp32 weights, checkpointing ignored)."""
    assert paper_cost.updates == 7339
    assert paper_cost.memory["frozen_weights"] == pytest.approx(2 * (8_030_261_248), rel=1e-9)
    # trainable tensors in fp32, with a gradient and AdamW's two moments
    assert paper_cost.memory["trainable_state"] == 16 * paper_cost.trainable_params
    card = cost.DEVICES["rtx4090d-48gb"]
    assert cost.fits(paper_cost, card)
    assert sum(paper_cost.memory_other.values()) > paper_cost.memory["activations"] * 3


def test_flops_per_update_are_forward_backward_and_recompute(paper_cost):
    """Per token at length 2048: the forward through all 32 layers and the head (≈ 2 · 8.0e9 + attention), the
    backward through the top 16 layers and the head (input gradients, ≈ half that) and their recompute (≈ the same
    again): 27-33 GFLOP per token (kills: the backward charged for all 32 layers, or no recompute)."""
    per_token = paper_cost.flops_update / (128 * 2048)
    assert 27e9 < per_token < 33e9


def test_refusal_names_the_smallest_change_that_fits(capsys):
    """Without gradient checkpointing the recipe does not fit a 48 GB card: exit 1 and one line naming
    ``trainer.gradient_checkpointing=true`` (kills: a refusal that suggests a bigger card first, or none)."""
    rc = main(
        [
            "plan",
            "--device",
            "rtx4090d-48gb",
            "--gpus",
            "4",
            "--",
            "python",
            "train.py",
            *PAPER,
            "trainer.gradient_checkpointing=false",
        ]
    )
    out = capsys.readouterr().out
    refused = [line for line in out.splitlines() if "REFUSED" in line]
    assert rc == 1 and len(refused) == 1
    assert "smallest change that fits: trainer.gradient_checkpointing=true" in refused[0]


def test_study_plan_counts_jobs_and_launcher(capsys):
    """Table 3: 15 jobs (its expected_jobs), 4 GPUs per job from slurm_4gpu_ddp, GPU-hours = jobs × hours × 4."""
    rc = main(["plan", "sweeps/table3.yaml", "hydra/launcher=slurm_4gpu_ddp", "--device", "h100"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "study: 15 job(s)" in out
    assert "GPUs per job 4" in out


def test_plan_jobs_adds_up_gpu_hours():
    """GPU-hours = Σ jobs × wall time × GPUs (kills: GPUs per job left out of the total)."""
    jobs = budget.study_jobs(load_study("sweeps/table3.yaml"), [])
    plan = budget.plan_jobs(jobs[:3], cost.DEVICES["h100"], 0.4, 4, None, None)
    row = plan["rows"][0]
    assert plan["jobs"] == 3
    assert plan["gpu_hours"] == pytest.approx(3 * row["seconds"] * 4 / 3600)


def test_calibrate_command_counts_expected_trials(capsys):
    """``calibrate.py ablation=full,no_history target_skip=0.1,0.2``: 4 calibration studies, each the measured mean
    trial count (kills: targets or combinations not multiplied)."""
    rc = main(
        [
            "plan",
            "--device",
            "h100",
            "--",
            "python",
            "calibrate.py",
            *PAPER[:-2],
            "ablation=full,no_history",
            "target_skip=0.1,0.2",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    trials = budget.measured_trials()
    assert f"4 calibration stud(ies) to run, ~{4 * trials['mean']:.0f} trials" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["plan", "sweeps/table3.yaml", "--device", "tpu"], "--device tpu: unknown; allowed: h100"),
        (["plan", "sweeps/no_such.yaml"], "sweeps/no_such.yaml: no such study file"),
        (["plan", "--", "python", "train.py", "model=gpt5"], "Could not find 'model/gpt5'"),
        (["plan", "--", "python", "eval.py"], "expected `python train.py"),
        (["plan", "sweeps/table3.yaml", "--util", "1.5"], "--util 1.5: must lie in (0, 1]"),
        (["plan", "--", "python", "train.py", "--length", "7"], "--length"),  # planner options go before --
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    """An unknown device, study file, config value or entry point: exit 2, one line naming it."""
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0]


def test_smallest_fix_tries_the_least_change_first(paper_cost):
    """On a card between the options' totals the suggestion is the first option that fits, in the documented order:
    the micro-batch before a bigger card, evaluation's batch when only evaluation is too big (kills: the order
    reversed, evaluation's memory ignored, a fix suggested that does not fit)."""

    def replan(extra):
        return cost.job_cost(cost.compose_job([*PAPER, *extra]), world=4)

    gib = cost.GIB
    train = cost.train_bytes(paper_cost)
    half = cost.train_bytes(replan(["trainer.micro_batch=2"]))
    assert half < train
    # a card whose usable memory lies between micro-batch 2's training total and micro-batch 4's
    between = (half + train) / 2
    card = cost.Device("test", (between + gib) / (0.95 * gib), 100, 50, 1000)
    assert cost.train_bytes(paper_cost) > card.usable_bytes() > half
    fix = cost.smallest_fix(paper_cost, card, replan)
    assert fix.startswith("trainer.micro_batch=2") or fix.startswith("trainer.micro_batch=2 eval.batch_size=")

    # at 775 tokens per sequence training needs less than paper7 at eval batch 16: on a card between the two the
    # eval batch is halved and training left alone
    def replan_short(extra):
        return cost.job_cost(cost.compose_job([*PAPER, *extra]), world=4, length=775)

    short = replan_short([])
    roomy = cost.Device("test2", (cost.train_bytes(short) + 2 * gib) / (0.95 * gib), 100, 50, 1000)
    assert short.eval_memory > roomy.usable_bytes() >= cost.train_bytes(short)
    fix = cost.smallest_fix(short, roomy, replan_short)
    assert fix.startswith("eval.batch_size=") and "trainer." not in fix


def test_calibrated_knobs_without_an_entry_count_one_calibration_per_variant(tmp_path, capsys):
    """A study at ``alpha=calibrated`` whose calibration file has no entry: one calibration study per (variant,
    target), not per seed, each the measured mean trial count (kills: trials counted per job or not at all)."""
    study = tmp_path / "cal.yaml"
    study.write_text(
        "overrides: [model=llama3_1_8b, data=tulu3, trainer=paper, eval=none, alpha=calibrated,\n"
        f"            calibration.target_skip=0.2, calibration.file={tmp_path / 'none.json'}]\n"
        "grid: {ablation: [full, no_history], seed: [42, 43, 44]}\n"
    )
    rc = main(["plan", str(study), "--device", "h100", "--gpus", "4"])
    out = capsys.readouterr().out
    mean = budget.measured_trials()["mean"]
    assert rc == 0
    assert "study: 6 job(s)" in out
    assert f"2 calibration stud(ies) to run, ~{2 * mean:.0f} trials" in out


def test_options_the_model_does_not_cover_are_named():
    """Mutant killed: the labelled-logits / pad-waste note dropped (the figures would pass for exact on a run whose
    LM head runs at labelled positions only)."""
    on = cost.job_cost(
        cost.compose_job(["model=tiny", "trainer.labelled_logits=true", "trainer.pad_waste=0.1"]), world=1
    )
    off = cost.job_cost(
        cost.compose_job(["model=tiny", "trainer.labelled_logits=false", "trainer.pad_waste=1.0"]), world=1
    )
    assert on.unmodelled == ("trainer.labelled_logits=true", "trainer.pad_waste=0.1") and off.unmodelled == ()
