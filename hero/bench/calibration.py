"""Benchmark: trials needed to reach ±tolerance, MonotoneSampler vs TPE, for several variants, in one run.

    python -m hero.bench.calibration                                   # recorded response (records it first)
    python -m hero.bench.calibration --response real --tpe-seeds 1     # every trial a real training run
    python -m hero.bench.calibration --variants full,no_history,no_memory_read --targets 0.05,0.1,0.15

The response (α → realized parameter skip rate) comes from REAL training runs of each variant
on the micro testbed (``model.recipe=micro``, settings in ``TRIAL`` plus any ``--set`` overrides):

* ``--response recorded`` (default): a grid of α per variant is trained once (quarter decades,
  plus ``REFINE`` runs inside the interval where the skip rate jumps most; records under
  ``--root``, reused on reruns), and the samplers query the monotone
  (isotonic) fit of those points, linear in log α between grid points. Cheap enough to run TPE
  with several seeds; the output says so.
* ``--response real``: every proposal is a real training run (cached by α).
* ``--response paper``: the paper's own α sweep of full HeRo on Llama-3.1-8B (HERO_SPEC §8:
  α = 1e-4, 3e-4, 5e-4, 1e-3 → 13.19, 18.14, 23.40, 26.87 % realized skip), linear in log α
  between its points: a smooth real response, one curve, probed at several targets.

On the micro testbed one routable layer decides for all tokens at once, so the skip rate
jumps from ~0 to the ceiling within a few hundredths of a decade of α (a cliff); there
bisection bounds any sampler. ``no_memory_read`` equals ``full`` there (with one routable
layer the memory is read before anything was written, c_1 = 0), hence ``no_aux_state`` in
the default variants.

A run counts the trials each sampler proposes until one lands within the tolerance
(TPE is capped at ``--budget``; a miss is printed as ">budget").
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import statistics
import time
from pathlib import Path

import optuna

from hero.calibration.sampler import PARAM, SKIP_ATTR, TARGET_ATTR, MonotoneSampler

TRIAL = [
    "model.recipe=micro",
    "trainer.max_steps=40",
    "trainer.global_batch=8",
    "trainer.micro_batch=8",
    "trainer.lr=1e-3",
    "trainer.num_threads=1",
    "trainer.progress=false",
    "logger=none",
    "eval=none",
    "objective=skip.param_rate",
]
GRID = [10 ** (k / 4) for k in range(-20, -3)]  # 1e-5 … 0.1, quarter decades
REFINE = 4  # extra runs inside the grid interval where the skip rate jumps most
BOUNDS = (1e-6, 10.0)
X0 = math.log10(3e-3)  # the default alpha of conf/train.yaml, where calibrate.py starts
PAPER = [(-4.0, 0.1319), (math.log10(3e-4), 0.1814), (math.log10(5e-4), 0.2340), (-3.0, 0.2687)]


def real_run(variant: str, alpha: float, root: Path, extra: list[str]) -> float:
    """Realized skip rate of one real training run (cached on disk by the pipeline's config hash)."""
    from hydra import compose, initialize_config_dir

    from hero.pipeline import run

    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[*TRIAL, f"ablation={variant}", f"alpha={alpha!r}", f"paths.root={root}", *extra],
        )
    return run(cfg, run_dir=root / "runs" / variant / f"alpha={alpha:.6g}")


def isotonic(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Pool-adjacent-violators: the closest non-decreasing sequence (points sorted by x)."""
    blocks: list[list[float]] = []  # [sum, count, x_first]
    xs = [x for x, _ in points]
    for _, y in points:
        blocks.append([y, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    ys = [b[0] / b[1] for b in blocks for _ in range(int(b[1]))]
    return list(zip(xs, ys))


class Recorded:
    """The isotonic fit of recorded (log10 α, skip) points, linear between them, flat outside."""

    def __init__(self, points: list[tuple[float, float]]) -> None:
        self.points = isotonic(sorted(points))
        self.xs = [x for x, _ in self.points]

    def __call__(self, alpha: float) -> float:
        x = math.log10(alpha)
        i = bisect.bisect_left(self.xs, x)
        if i == 0:
            return self.points[0][1]
        if i == len(self.points):
            return self.points[-1][1]
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def trials_to_tolerance(sampler, response, target: float, tolerance: float, budget: int) -> int | None:
    """Trials a sampler proposes until one is within ``tolerance`` of ``target`` (None: not within budget)."""
    study = optuna.create_study(sampler=sampler, direction="minimize")
    study.set_user_attr(TARGET_ATTR, target)
    distribution = optuna.distributions.FloatDistribution(*BOUNDS, log=True)
    for n in range(1, budget + 1):
        trial = study.ask({PARAM: distribution})
        skip = response(trial.params[PARAM])
        trial.set_user_attr(SKIP_ATTR, skip)
        study.tell(trial, abs(skip - target))
        if abs(skip - target) <= tolerance:
            return n
    return None


def record_grid(variant: str, root: Path, extra: list[str]) -> list[tuple[float, float]]:
    path = root / f"response-{variant}.json"
    if path.is_file():
        return [tuple(p) for p in json.loads(path.read_text())["points"]]
    points = [(math.log10(a), real_run(variant, a, root, extra)) for a in GRID]
    steepest = max(range(len(points) - 1), key=lambda i: abs(points[i + 1][1] - points[i][1]))
    (x0, _), (x1, _) = points[steepest], points[steepest + 1]
    points += [
        (x, real_run(variant, 10**x, root, extra))
        for x in (x0 + k * (x1 - x0) / (REFINE + 1) for k in range(1, REFINE + 1))
    ]
    from hero.results import write_atomic

    write_atomic(path, {"variant": variant, "settings": [*TRIAL, *extra], "points": points})
    return points


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hero.bench.calibration", description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default="full,no_history,no_aux_state")
    ap.add_argument("--targets", default=None, help="default 0.1 (micro testbed), 0.15,0.2,0.25 (paper)")
    ap.add_argument("--tolerance", type=float, default=0.005)
    ap.add_argument("--response", choices=("recorded", "real", "paper"), default="recorded")
    ap.add_argument("--tpe-seeds", type=int, default=5)
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--root", default=os.environ.get("HERO_OUTPUTS", "outputs") + "/calibration/bench")
    ap.add_argument("--set", action="append", default=[], help="extra train overrides for the real runs")
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    root = Path(args.root).absolute()
    variants = ["full (paper, Llama-3.1-8B)"] if args.response == "paper" else args.variants.split(",")
    targets = [float(t) for t in (args.targets or ("0.15,0.2,0.25" if args.response == "paper" else "0.1")).split(",")]
    start = time.time()
    if args.response != "paper":
        print(f"trial settings: {' '.join(TRIAL + args.set)}")
    rows = []
    for variant in variants:
        if args.response == "paper":
            response = Recorded(PAPER)
            label = "paper: α sweep of HERO_SPEC §8 (4 real runs), linear in log α"
            print(f"{variant}: {label}", flush=True)
        elif args.response == "recorded":
            grid = record_grid(variant, root, args.set)
            response = Recorded(grid)
            label = f"recorded: isotonic fit of {len(grid)} real runs (α = 1e-5 … 0.1, quarter decades + {REFINE})"
            raw = " ".join(f"{10**x:.3g}:{y:.3f}" for x, y in sorted(grid))
            print(f"{variant}: {label}; raw α:skip {raw}", flush=True)
        else:
            cache: dict[float, float] = {}

            def response(alpha: float, variant=variant, cache=cache) -> float:
                key = float(f"{alpha:.4g}")
                if key not in cache:
                    cache[key] = real_run(variant, key, root, args.set)
                return cache[key]

            label = "real: every trial a training run"
        for target in targets:
            mono = trials_to_tolerance(MonotoneSampler(x0=X0), response, target, args.tolerance, args.budget)
            tpe = [
                trials_to_tolerance(optuna.samplers.TPESampler(seed=s), response, target, args.tolerance, args.budget)
                for s in range(args.tpe_seeds)
            ]
            rows.append((variant, target, mono, tpe, label))
    print(
        f"\ntrials to reach ±{100 * args.tolerance:.2f} pp (TPE capped at {args.budget}; wall {time.time() - start:.0f} s)"
    )
    print(f"{'variant':<18} {'target':>7} {'monotone':>9} {'TPE mean':>9}  TPE per seed")
    ratios = []
    for variant, target, mono, tpe, _ in rows:
        capped = [t if t is not None else args.budget for t in tpe]
        mean = statistics.mean(capped)
        ratios.append((mono or args.budget) / mean)
        seeds = " ".join(str(t) if t is not None else f">{args.budget}" for t in tpe)
        print(f"{variant:<18} {target:>7.4f} {mono if mono else '>' + str(args.budget):>9} {mean:>9.1f}  {seeds}")
    worst = max((m or args.budget) for _, _, m, _, _ in rows)
    print(
        f"goal ≤ 6 trials per variant: {'met' if worst <= 6 else 'NOT met'} (worst {worst}); "
        f"goal ≤ 1/3 of TPE: {'met' if max(ratios) <= 1 / 3 else 'NOT met'} (worst ratio {max(ratios):.2f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
