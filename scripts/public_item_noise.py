"""Per-item outputs of dense SmolLM2-135M and a perturbed copy on ``eval=public`` and paper7_cpu's Retain tasks,
and the item-sampling standard error of each task's Retain (docs/public_ppl/README.md).

The perturbed model is a method that trains nothing (``method=static_drop method.k=6``: the six lowest-Block-
Influence routable FFNs of fifteen removed, ≈ 12 % parameter skip; or ``method=random_skip method.p=0.405
method.adapter=false``), built as ``train.py experiment=smollm2_cpu <method overrides>`` builds it. Every task is
scored through lm-eval 0.4.13 with ``log_samples=True`` (what ``hero.evaluation.harness.evaluate_task`` does,
plus the per-item outputs), on the same seeded items for both models. ``--out`` gets the per-item outputs (JSON),
``--report`` prints per task: dense value, Retain, and the bootstrap standard error of Retain over items
(items resampled jointly for both models: the paired item-sampling component), and the same for the Retain mean
over paper7_cpu's four Retain tasks.

    PYTHONPATH=. HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1 python scripts/public_item_noise.py \\
        --out /tmp/items.json method=static_drop method.k=6
    python scripts/public_item_noise.py --report /tmp/items.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parents[1]
PAPER = ("arc_easy", "hellaswag", "winogrande", "piqa")  # paper7_cpu's Retain tasks
B = 2000  # bootstrap resamples


def task_items(lm, manager, spec) -> tuple[float, list[dict], float, float]:
    """(aggregate primary metric, per-item outputs, wall seconds, process CPU seconds) of one task spec, scored by
    ``hero.evaluation.harness.evaluate_task`` with its per-item rows (``item_rows``) in this script's format."""
    from hero.evaluation.harness import evaluate_task

    start, cpu = time.time(), time.process_time()
    rows: list[dict] = []
    metrics, _ = evaluate_task(lm, manager, spec, rows)
    items = []
    for row in rows:
        item = {"doc_id": row["item"]}
        value = row["metrics"][spec.metric]
        if isinstance(value, list):  # (summed log-likelihood, tokens) of a ppl task
            item["ll"], item["n"] = float(value[0]), int(value[1])
        else:
            item["value"] = float(value)
            item["lls"] = row["ll"]
            if isinstance(row.get("gold"), int):
                item["gold"] = row["gold"]
            elif "acc" in row["metrics"] and len(row["ll"]) == 2:
                # WinoGrande: lm-eval's target is the shared continuation, not an index; with two options the gold
                # one is the prediction when it scored, the other one when it did not
                item["gold"] = row["pred"] if row["metrics"]["acc"] == 1.0 else 1 - row["pred"]
        items.append(item)
    return metrics[spec.metric], items, time.time() - start, time.process_time() - cpu


def specs(public_sample: int):
    from omegaconf import OmegaConf

    from hero.evaluation.suites import task_specs

    public = OmegaConf.load(REPO / "conf" / "eval" / "public.yaml")
    for name in public.tasks:
        public.tasks[name].sample = public_sample
    paper = OmegaConf.load(REPO / "conf" / "eval" / "paper7_cpu.yaml")
    return [s for s in task_specs(public)], [s for s in task_specs(paper) if s.name in PAPER]


def measure(perturbations: list[list[str]], public_sample: int, out: Path, dense_from: Path | None = None) -> None:
    from hero.evaluation import paper, public
    from hero.evaluation.harness import harness_model
    from hero.spec import RunSpec
    from hero.training import seed_everything

    torch.set_num_threads(1)

    def resolve(overrides):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            spec = RunSpec.resolve(compose(config_name="train", overrides=["experiment=smollm2_cpu", *overrides]))
        return spec, spec.load("cpu")

    spec, loaded = resolve(perturbations[0])
    tokenizer = loaded.backbone.tokenizer
    public_specs, paper_specs = specs(public_sample)
    workdir = Path(tempfile.mkdtemp(prefix="public-noise-"))
    managers = {"public": public.task_manager(tokenizer, workdir), "paper": paper.task_manager(workdir)}
    record = {"perturbations": perturbations, "public_sample": public_sample, "models": {}, "cards": {}}

    def score(label, model):
        model.eval()
        lm = harness_model(model, tokenizer, 16)
        record["models"][label] = {}
        for group, group_specs in (("public", public_specs), ("paper", paper_specs)):
            for s in group_specs:
                value, items, seconds, cpu = task_items(lm, managers[group], s)
                entry = {"metric": s.metric, "value": value, "s": seconds, "cpu_s": cpu, "items": items}
                record["models"][label][s.name] = entry
                print(
                    f"{label} {s.name} {s.metric}={value:.4f} n={len(items)} {seconds:.0f} s {cpu:.0f} cpu-s",
                    flush=True,
                )
                out.write_text(json.dumps(record))

    if dense_from is None:
        score("dense", loaded.backbone.model)
    else:  # dense's items from an earlier measurement (same code, same items)
        earlier = json.loads(dense_from.read_text())
        if earlier["public_sample"] != public_sample:
            sys.exit(
                f"error: --dense-from {dense_from} has public_sample={earlier['public_sample']}, not {public_sample}"
            )
        record["models"]["dense"] = earlier["models"]["dense"]
    for k, overrides in enumerate(perturbations):
        if k > 0:  # a method attaches to the backbone in place: a fresh copy for each perturbation
            spec, loaded = resolve(overrides)
        seed_everything(spec.seed)
        prepared = spec.method.prepare(spec, loaded.backbone.model, tokenizer, loaded.layers, loaded.bed)
        record["cards"][" ".join(overrides)] = prepared.card
        score(" ".join(overrides), prepared.model)


def item_value(task: dict, item: dict, measure: str) -> tuple[float, float]:
    """(numerator, denominator) of one item for a task's aggregate: token-weighted for ppl tasks."""
    if "ll" in item:
        return item["ll"], item["n"]
    if measure == "gold_prob":  # the gold choice's probability among the choices (continuous, per item)
        lls = np.array(item["lls"])
        p = np.exp(lls - lls.max())
        return float(p[item["gold"]] / p.sum()), 1.0
    return item["value"], 1.0


def aggregate(num: np.ndarray, den: np.ndarray, ppl: bool) -> np.ndarray:
    """Task value over the items of each resample (rows): exp(Σll / Σn) for ppl tasks, the mean otherwise."""
    return np.exp(num.sum(-1) / den.sum(-1)) if ppl else num.mean(-1)


def task_retain(record: dict, label: str, name: str, measure: str, rng: np.random.Generator):
    """Dense value, Retain, and the paired bootstrap of Retain (B resamples of the task's items, both models)."""
    dense, run = record["models"]["dense"][name], record["models"][label][name]
    assert [i["doc_id"] for i in dense["items"]] == [i["doc_id"] for i in run["items"]]
    ppl = "ll" in dense["items"][0]
    d = np.array([item_value(dense, i, measure) for i in dense["items"]])
    r = np.array([item_value(run, i, measure) for i in run["items"]])
    n = len(d)
    idx = rng.integers(0, n, size=(B, n))
    dv, rv = aggregate(d[:, 0], d[:, 1], ppl), aggregate(r[:, 0], r[:, 1], ppl)
    boot = 100 * aggregate(r[idx, 0], r[idx, 1], ppl) / aggregate(d[idx, 0], d[idx, 1], ppl)
    # unpaired: the two models' items resampled independently (what two runs on independent item draws would see)
    idx2 = rng.integers(0, n, size=(B, n))
    unpaired = 100 * aggregate(r[idx2, 0], r[idx2, 1], ppl) / aggregate(d[idx, 0], d[idx, 1], ppl)
    return {
        "n": n,
        "dense": float(dv),
        "retain": float(100 * rv / dv),
        "boot": boot,
        "se_unpaired": float(unpaired.std()),
    }


def report(path: Path) -> None:
    record = json.loads(path.read_text())
    rng = np.random.default_rng(0)
    dense = record["models"]["dense"]
    for label in (k for k in record["models"] if k != "dense"):
        print(f"\n{label}\n")
        print(
            "| task | measure | items | dense | Retain | paired SE | SE × √items | (100 − Retain) / SE | unpaired SE "
            "| dense s (CPU s) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        rows = {}
        for name in (n for n in dense if n in record["models"][label]):
            for m in ["primary"] + (["gold_prob"] if name in PAPER else []):
                out = task_retain(record, label, name, m, rng)
                rows[(name, m)] = out
                se = out["boot"].std()
                metric = dense[name]["metric"] if m == "primary" else m
                seconds = f"{dense[name]['s']:.0f} ({dense[name].get('cpu_s', float('nan')):.0f})"
                print(
                    f"| {name} | {metric} | {out['n']} | {out['dense']:.4f} | {out['retain']:.2f} | {se:.2f} | "
                    f"{se * np.sqrt(out['n']):.1f} | {(100 - out['retain']) / se:.1f} | {out['se_unpaired']:.2f} | "
                    f"{seconds} |"
                )
        for m in ("primary", "gold_prob"):
            if all((t, m) in rows for t in PAPER):
                mean = np.mean([rows[(t, m)]["boot"] for t in PAPER], axis=0)
                value = np.mean([rows[(t, m)]["retain"] for t in PAPER])
                se = mean.std()
                print(
                    f"| paper7_cpu Retain mean ({m}) | | 4×100 | | {value:.2f} | {se:.2f} | | {(100 - value) / se:.1f} "
                    "| | |"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="measure and write the per-item outputs here")
    parser.add_argument("--report", type=Path, help="read per-item outputs and print the standard errors")
    parser.add_argument("--public-sample", type=int, default=1000)
    parser.add_argument("--dense-from", type=Path, help="take dense's per-item outputs from an earlier --out file")
    parser.add_argument(
        "perturbations", nargs="*", help="one quoted string per perturbed model, e.g. 'method=static_drop method.k=6'"
    )
    args = parser.parse_args()
    if args.out is not None:
        measure([p.split() for p in args.perturbations], args.public_sample, args.out, args.dense_from)
    if args.report is not None:
        report(args.report)
    if args.out is None and args.report is None:
        sys.exit("error: give --out (measure) and/or --report (read)")


if __name__ == "__main__":
    main()
