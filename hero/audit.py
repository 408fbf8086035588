"""Do the testbed's claims survive a rebuild? ``python -m hero.audit``.

A claim about a trained model (a sensitivity, an ordering, a threshold) is a property
of the *recipe* only if it holds on every build of it. Builds differ in noise: the
recipe seed (text sampling, initial weights, data order) and the CPU's instruction set
(AVX-512 and AVX2 kernels sum floats in another order, so two machines train two
different backbones from one recipe). The audit builds the testbed for each recipe seed
× instruction set, runs the same jobs on every build through the real pipeline
(``hero.pipeline.run``: training, lm-eval scoring, records), and checks each claim on
each build:

==================  ==========================================================================
claim               holds on a build when
==================  ==========================================================================
above_chance        every Retain task's dense score is ≥ ``CHANCE_MARGIN`` × its chance level
drop_loses_10       ``method=drop_routable_ffn`` scores Retain ≤ 90 against the baseline
no_skip_near_100    ``method=lora`` and HeRo at α = 0 (trained, no skip pressure) land within
                    100 ± 2 of the baseline
hero_within_noise   HeRo at the default α does not beat the baseline by more than the trained
                    no-skip runs' own spread (max |Retain − 100| of lora and α = 0, at least 2)
noise_floor         the std of HeRo's Retain over seeds is ≤ ¼ of the drop_routable_ffn loss
token_types         without the routable FFNs the loss rises on play text and sum-answer tokens
==================  ==========================================================================

The baseline is the one the pipeline uses (``eval.baseline``, dense); ``retain_vs_lora`` in
``audit.json`` is HeRo's Retain against the trained no-skip reference instead. Retain is
recomputed here from the records' per-task scores on ``RETAIN_TASKS`` (the tasks
``conf/eval/tiny.yaml`` does not mark ``retain: false``), so a change of the Retain set
is re-checked on the same records; ``audit.json`` keeps every task's scores.

Every job is an ordinary run (``paths.root=<outputs>/<isa>-<seed>``), so an interrupted
audit resumes: finished runs are skipped by config hash, builds are cached.

    python -m hero.audit --out docs/testbed_audit                  # 3 recipe seeds × {native, avx2}
    python -m hero.audit --recipe-seeds 1234 --isa native --out /tmp/audit   # one build

``native`` is this machine's kernels; ``avx2`` sets ``ATEN_CPU_CAPABILITY=avx2
MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2``, which reproduces an AVX2
machine's build bit for bit on an AVX-512 machine. On a machine without AVX-512 the two
are the same: use more recipe seeds instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from hero.statistics import retain_value
from hero.testbed.tasks import CHANCE, CHANCE_MARGIN, RETAIN_TASKS, TASK_PRIMARY_METRIC

ISA_ENV = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
# Token types whose loss rises without the routable FFNs on every audited build (fact answers do not: on some
# builds the second half's FFNs raise the loss of held-out-phrasing answers).
TOKEN_TYPE_CLAIM = ("plain", "arith_answer")
HERO_SEEDS = (42, 43, 44)
# name -> train.py overrides; the HeRo runs at the default α are added per seed.
JOBS = {
    "dense": ["method=dense"],
    "drop_routable_ffn": ["method=drop_routable_ffn"],
    "lora": ["method=lora", "seed=42"],
    "hero_alpha0": ["alpha=0", "seed=42"],
}
CONF = Path(__file__).resolve().parents[1] / "conf"


def jobs(hero_seeds, only: list[str] | None = None) -> dict[str, list[str]]:
    """The jobs run on every build (``only``: a subset by name, e.g. the cheap evaluations first)."""
    every = {**JOBS, **{f"hero_s{s}": [f"seed={s}"] for s in hero_seeds}}
    return {name: every[name] for name in only} if only else every


def build_name(isa: str, recipe_seed: int) -> str:
    return f"{isa}-{recipe_seed}"


def run_build(
    isa: str,
    recipe_seed: int,
    cache_root: Path,
    outputs: Path,
    hero_seeds,
    extra: list[str],
    only: list[str] | None = None,
) -> None:
    """Worker (run under the instruction set's environment): build the testbed and run every job on it."""
    from hydra import compose, initialize_config_dir

    from hero.pipeline import run

    root = outputs / build_name(isa, recipe_seed)
    common = [
        f"model.recipe_seed={recipe_seed}",
        f"paths.cache={cache_root / isa}",
        f"paths.root={root}",
        "logger=none",
        "trainer.progress=false",
    ]
    for name, overrides in jobs(hero_seeds, only).items():
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="train", overrides=[*common, *overrides, *extra])
        print(f"[audit] {build_name(isa, recipe_seed)} {name}", flush=True)
        run(cfg, run_dir=root / name)


def _retain(scores: dict, baseline: dict, primary: dict[str, str]) -> tuple[float | None, dict[str, float | None]]:
    """Retain (``hero.statistics.retain_value``) and its per-task ratios × 100; None where the baseline scores 0
    (no ratio, as in ``hero.statistics.retain``)."""
    per_task = {t: 100.0 * scores[t][m] / baseline[t][m] if baseline[t][m] else None for t, m in primary.items()}
    if None in per_task.values():
        return None, per_task
    return retain_value({t: scores[t][m] / baseline[t][m] for t, m in primary.items()}), per_task


def summarize_build(root: Path, hero_seeds) -> dict:
    """Properties of one build from its records and its testbed manifest; a claim whose jobs have not run is None."""
    records = {
        name: json.loads((root / name / "results.json").read_text())
        for name in jobs(hero_seeds)
        if (root / name / "results.json").is_file()
    }
    dense = records["dense"]
    primary = {t: TASK_PRIMARY_METRIC[t] for t in RETAIN_TASKS}
    base = dense["eval"]
    retain = {name: _retain(r["eval"], base, primary) for name, r in records.items() if name != "dense"}
    hero = [
        retain[f"hero_s{s}"][0] for s in hero_seeds if f"hero_s{s}" in retain and retain[f"hero_s{s}"][0] is not None
    ]
    types = _manifest(dense)["token_type_losses"]
    drop = retain.get("drop_routable_ffn", (None,))[0]
    drop_loss = 100.0 - drop if drop is not None else None
    no_skip = [retain[n][0] for n in ("lora", "hero_alpha0") if n in retain and retain[n][0] is not None]
    vs_lora = {
        name: _retain(records[name]["eval"], records["lora"]["eval"], primary)[0]
        for name in records
        if name.startswith("hero_s") and "lora" in records
    }
    out = {
        "dense": {t: base[t][m] for t, m in primary.items()},
        "chance": {t: CHANCE[t] for t in primary},
        "retain": {name: value for name, (value, _) in retain.items()},
        "per_task": {name: per for name, (_, per) in retain.items()},
        "skip": {name: r["skip"]["param_rate"] for name, r in records.items()},
        "retain_vs_lora": vs_lora,
        "hero_mean": statistics.mean(hero) if hero else None,
        "hero_std": statistics.stdev(hero) if len(hero) == len(hero_seeds) > 1 else None,
        "drop_loss": drop_loss,
        "token_type_losses": types,
        "diagnostics": {
            t: {name: r["eval"][t][m] for name, r in records.items()}
            for t, m in TASK_PRIMARY_METRIC.items()
            if t not in RETAIN_TASKS
        },
    }
    complete_no_skip = len(no_skip) == 2
    spread = max(2.0, *(abs(v - 100.0) for v in no_skip)) if complete_no_skip else None
    out["claims"] = {
        "above_chance": all(base[t][m] >= CHANCE_MARGIN * CHANCE[t] for t, m in primary.items()),
        "drop_loses_10": drop_loss >= 10.0 if drop_loss is not None else None,
        "no_skip_near_100": all(abs(v - 100.0) <= 2.0 for v in no_skip) if complete_no_skip else None,
        "hero_within_noise": out["hero_mean"] <= 100.0 + spread if hero and spread is not None else None,
        "noise_floor": out["hero_std"] <= drop_loss / 4 if out["hero_std"] is not None and drop_loss else None,
        "token_types": all(types["drop_routable_ffn"][k] > types["dense"][k] for k in TOKEN_TYPE_CLAIM),
    }
    return out


def _manifest(dense_record: dict) -> dict:
    from omegaconf import OmegaConf

    from hero.once import resolve_cache_root
    from hero.testbed import Testbed
    from hero.testbed.recipe import recipe_hash

    cfg = dense_record["config"]
    recipe = Testbed.recipe_of(OmegaConf.create(cfg["model"]))
    path = resolve_cache_root(cfg["paths"]["cache"]) / "testbed" / recipe_hash(recipe) / "manifest.json"
    return json.loads(path.read_text())


def _fmt(value, spec: str = ".1f") -> str:
    return "–" if value is None else format(value, spec)


def table(builds: dict[str, dict]) -> str:
    """The build × property table (markdown); – marks what has not been measured."""
    first = next(iter(builds.values()))
    tasks = list(first["dense"])
    claims = list(first["claims"])
    head = [
        "build",
        *(f"dense {t} (chance)" for t in tasks),
        "drop Retain",
        "lora Retain",
        "α=0 Retain",
        "HeRo Retain s42/43/44",
        "HeRo mean ± std",
        "HeRo skip %",
        "HeRo vs LoRA (mean)",
        *claims,
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, b in builds.items():
        hero = [v for k, v in b["retain"].items() if k.startswith("hero_s")]
        skips = [100 * v for k, v in b["skip"].items() if k.startswith("hero_s")]
        row = [
            name,
            *(f"{b['dense'][t]:.3g} ({b['chance'][t]:.2g})" for t in tasks),
            _fmt(b["retain"].get("drop_routable_ffn")),
            _fmt(b["retain"].get("lora")),
            _fmt(b["retain"].get("hero_alpha0")),
            " / ".join(_fmt(v) for v in hero) or "–",
            f"{_fmt(b['hero_mean'])} ± {_fmt(b['hero_std'])}",
            f"{min(skips):.1f}–{max(skips):.1f}" if skips else "–",
            _fmt(statistics.mean(vs))
            if (vs := [v for v in b.get("retain_vs_lora", {}).values() if v is not None])
            else "–",
            *({True: "yes", False: "**no**", None: "–"}[b["claims"][c]] for c in claims),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Check the testbed's claims on several builds of its recipe.")
    parser.add_argument("--recipe-seeds", default="1234,1235,1236", help="comma-separated recipe seeds")
    parser.add_argument("--isa", default="native,avx2", help=f"comma-separated, of {', '.join(ISA_ENV)}")
    parser.add_argument("--seeds", default=",".join(map(str, HERO_SEEDS)), help="HeRo training seeds per build")
    parser.add_argument("--out", required=True, help="where audit.json and audit.md go")
    parser.add_argument("--outputs", default=None, help="run records (default: <out>/runs)")
    parser.add_argument("--cache-root", default=None, help="testbed builds, one folder per ISA (default: <out>/cache)")
    parser.add_argument(
        "--jobs",
        default=None,
        help="run only these jobs (comma-separated names, e.g. "
        "dense,drop_routable_ffn); the table shows what has been measured",
    )
    parser.add_argument("--report-only", action="store_true", help="tabulate the records already there, run nothing")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="train.py overrides for every job (e.g. trainer.max_steps=50)")
    args = parser.parse_args(argv)
    try:
        recipe_seeds = [int(s) for s in args.recipe_seeds.split(",")]
        hero_seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--recipe-seeds={args.recipe_seeds!r} / --seeds={args.seeds!r}: comma-separated integers")
    isas = args.isa.split(",")
    only = args.jobs.split(",") if args.jobs else None
    unknown = sorted(set(only or ()) - set(jobs(hero_seeds)))
    if unknown:
        parser.error(f"--jobs={args.jobs!r}: {unknown} unknown; jobs are {', '.join(jobs(hero_seeds))}")
    bad = [i for i in isas if i not in ISA_ENV]
    if bad:
        parser.error(f"--isa={args.isa!r}: {bad} unknown; allowed: {', '.join(ISA_ENV)}")
    out = Path(args.out)
    outputs = Path(args.outputs or out / "runs")
    cache = Path(args.cache_root or out / "cache")
    if args.worker:
        run_build(isas[0], recipe_seeds[0], cache, outputs, hero_seeds, args.overrides, only)
        return 0
    builds = {}
    for isa in isas:
        for seed in recipe_seeds:
            env = {**os.environ, **ISA_ENV[isa]}
            cmd = [
                sys.executable,
                "-m",
                "hero.audit",
                "--worker",
                "--isa",
                isa,
                "--recipe-seeds",
                str(seed),
                "--seeds",
                args.seeds,
                "--out",
                str(out),
                "--outputs",
                str(outputs),
                "--cache-root",
                str(cache),
                *(["--jobs", args.jobs] if args.jobs else []),
                *args.overrides,
            ]
            if not args.report_only:
                code = subprocess.run(cmd, env=env).returncode
                if code != 0:
                    print(
                        f"audit: build {build_name(isa, seed)} failed (exit {code}, its output above); the records "
                        f"already under {outputs} stay, and a rerun continues from them",
                        file=sys.stderr,
                    )
                    return 2
            builds[build_name(isa, seed)] = summarize_build(outputs / build_name(isa, seed), hero_seeds)
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit.json").write_text(json.dumps(builds, indent=1, sort_keys=True) + "\n")
    (out / "audit.md").write_text(table(builds))
    print(table(builds))
    failed = {name: [c for c, ok in b["claims"].items() if ok is False] for name, b in builds.items()}
    failed = {k: v for k, v in failed.items() if v}
    if failed:
        print(f"claims that do not hold on every build: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
