"""Two groups of runs compared paired by seed and by item: the Retain difference, its interval, and where its noise
comes from (item sampling vs training seed), with a design calculator for how many seeds × items resolve X points.

    python -m analysis.paired RECORDS... --a variant=full --b variant=no_memory_read [--at 0.12 | --at-b [--nearest]]
                              [--axis param]
                              [--seed-records DIR...] [--resolve 3]

A group is the records matching a selector (``key=value`` on record fields: method, variant, alpha, knob, …). The
two groups are compared on the seeds they share and, per task, on the items they share (same item id and document
hash); groups that share no seed, or suites with different fingerprints, are refused in one line.

The difference of group means is ``D = mean_s [Retain_A(s) − Retain_B(s)]`` over the S shared seeds, each Retain
recomputed from the items against the dense baseline's task values (it equals the record's Retain up to float
order). Its variance, per task t with the items' differences d_si = k_A·a_si − k_B·b_si (two-way layout, seeds ×
items) linearised into Retain points by c_t = 100 / (T · dense_t) · dv_t/d(mean s) at the two groups' mean value
(``analysis.items``), each group weighted by its own slope relative to that one, k = (dv/ds at the group's value) /
(dv/ds at the mean): 1 for accuracy, and for a perplexity task whose two values lie far apart the variance each
group's items carry at its own value (the delta method per group; one shared slope misweighted them by up to 11×
on this project's public task). A perplexity task's value is a ratio, exp(Σs/Σn), so its items enter as
s_i − r·n_i with r = Σs/Σn of their group (a longer document moves the ratio less than its log-likelihood alone):

    d_si = μ + α_s + β_i + ε_si          α: training seed, β: item, ε: seed × item
    Var(D) = σ²_α,R / S  +  Σ_t c_t² (σ²_β,t / I_t  +  σ²_ε,t / (S · I_t))

σ²_β,t and σ²_ε,t from the ANOVA mean squares of each task; σ²_α,R (the seed effect on the Retain difference) from
the variance over seeds of the per-seed Retain differences minus their interaction part. With one shared seed the
interaction cannot be told from the item effect, nor the seed effect measured: ``--seed-records`` then takes σ²_α,R
from records without items (their per-seed Retain differences on shared seeds, an upper bound that includes the
interaction), and the item component is the items' variance (also including it): both bounds are conservative.
The interval is t with Satterthwaite's degrees of freedom; a hierarchical bootstrap of D itself (seeds, then items
within each task, the same draws for both groups, each task value recomputed from the drawn items) is reported
beside it as a check: a bootstrap of the linearised D missed D by 4 points where a perplexity task's values were
19.7 and 3.4 (table3_smollm2, public task, ``no_aux_state`` seed 42 against full HeRo at 19.21 % skip).

``design`` answers the calculator's question from measured components: the 95 % half-width for S seeds per group
and items × k per task, and the CPU cost on this machine from the records' own training and per-item scoring times.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from analysis.items import ItemsError, item_frame, items_path, slope, task_value, task_values
from analysis.matched import AXES, at_skip, matches, nearest_shared, read_records
from analysis.reference import BaselineError, parse_selector
from analysis.stats import t_quantile

LEVEL = 0.95


@dataclass
class Run:
    """One scored run: its record, items at one operating point (trained threshold or a matched mixture), the
    task values they give, and its skip on both axes."""

    path: Path
    record: dict
    items: pl.DataFrame
    values: dict[str, float]
    param_skip: float
    compute_skip: float

    @property
    def seed(self) -> int:
        return self.record["seed"]


@dataclass
class Components:
    """Measured variance components of a paired Retain difference (Retain points²)."""

    tasks: list[str]
    c: dict[str, float]  # Retain points per unit of a task's mean item score
    items: dict[str, int]  # I_t: shared items per task
    item_var: dict[str, float]  # σ²_β,t (with one seed: σ²_β,t + σ²_ε,t)
    inter_var: dict[str, float]  # σ²_ε,t (0 with one seed, folded into item_var)
    seed_var: float  # σ²_α,R
    seeds: int  # S the components were measured on
    seed_source: str  # "items" or "records (…)"
    per_task_seed_var: dict[str, float] = field(default_factory=dict)
    seed_df: int | None = None  # degrees of freedom of σ²_α,R where it was measured (None: seeds − 1)

    def variance(self, seeds: int, scale: float = 1.0) -> tuple[float, float, float]:
        """(seed, item, seed × item) parts of Var(D) for ``seeds`` per group and items × ``scale`` per task."""
        item = sum(self.c[t] ** 2 * self.item_var[t] / (self.items[t] * scale) for t in self.tasks)
        inter = sum(self.c[t] ** 2 * self.inter_var[t] / (seeds * self.items[t] * scale) for t in self.tasks)
        return self.seed_var / seeds, item, inter

    def half_width(self, seeds: int, scale: float = 1.0, seed_df: int | None = None) -> float:
        """95 % half-width of D: t at Satterthwaite's degrees of freedom × √Var(D). The seed part's degrees of freedom
        are ``seed_df`` (where σ²_α,R was measured), else those of a study that estimates it on its own seeds."""
        parts = self.variance(seeds, scale)
        total = sum(parts)
        dfs = (seed_df or max(seeds - 1, 1), sum(max(n * scale - 1, 1) for n in self.items.values()), 10**6)
        denom = sum(p**2 / d for p, d in zip(parts, dfs, strict=True) if p > 0)
        df = max(1, int(total**2 / denom)) if denom > 0 else 10**6
        return t_quantile(LEVEL, min(df, 10**6)) * math.sqrt(total)


def load_run(path: str | Path, at: float | None = None, axis: str = "param", record: dict | None = None) -> Run:
    """A run at its trained threshold, or at exactly skip ``at`` on ``axis`` through its curve (``analysis.matched``);
    ``record``: the record at ``path`` when the caller has read it already."""
    path = Path(path)
    record = record if record is not None else json.loads(path.read_text())
    items = item_frame(path)
    if at is not None:
        items, values, param, compute = at_skip(record, items, at, axis, path)
    else:
        items = items.filter(pl.col("threshold").is_null())
        values = task_values(items)
        param, compute = record["skip"]["param_rate"], record["skip"].get("net_compute_rate", float("nan"))
    return Run(path, record, items, values, param, compute)


def with_items(records: list[tuple[Path, dict]]) -> list[tuple[Path, dict]]:
    """The (path, record) pairs whose per-item outputs lie beside the record: the runs this module can pair."""
    return [(p, r) for p, r in records if items_path(p).is_file()]


def pairs_at_b(
    runs: list[tuple[Path, dict]], want_a: dict, want_b: dict, axis: str, nearest: bool = False
) -> tuple[list[Run], list[Run], dict[int, tuple[float, float, float]]]:
    """Each A run of ``runs`` (records with items, ``with_items``) read at exactly its same-seed B run's trained skip
    on ``axis`` (B at its trained threshold); with ``nearest``, where A's curve does not reach it, both runs of that
    seed read at the nearest skip both curves reach (``matched.nearest_shared``). Returns (A runs, B runs, {seed:
    (skip read, B's trained skip, A's trained skip)}) over the seeds both groups have."""
    key = "param_skip" if axis == "param" else "compute_skip"
    trained_b = {run.seed: run for run in (load_run(p, None, axis, r) for p, r in runs if matches(r, want_b))}
    a_records = [(p, r) for p, r in runs if matches(r, want_a) and r["seed"] in trained_b]
    reads = {}
    for _, r in a_records:
        target = getattr(trained_b[r["seed"]], key)
        read = nearest_shared(r, trained_b[r["seed"]].record, target, axis) if nearest else target
        reads[r["seed"]] = (read, target, r["skip"][AXES[axis]])
    b = [
        run if reads[s][0] == getattr(run, key) else load_run(run.path, reads[s][0], axis, run.record)
        for s, run in trained_b.items()
        if s in reads
    ]
    a = [load_run(p, reads[r["seed"]][0], axis, r) for p, r in a_records]
    return a, b, reads


def dense_values(run: Run, roots: list[str]) -> dict[str, float]:
    """The dense baseline's task values on ``run``'s Retain tasks, plus ``p_gold`` values from its items.

    The baseline is the one the run's Retain names (``retain.baseline_source``, a cache file keyed by backbone ×
    suite): its record under ``<root>/baselines/<key>/`` when one of ``roots`` holds it, else the cache file."""
    source = Path(run.record["retain"]["baseline_source"])
    primary = run.record["eval_meta"]["primary_metric"]
    found = [p for r in roots for p in Path(r).rglob(f"baselines/{source.stem}/results.json")] if roots else []
    path = found[0] if found else source
    if not path.is_file():
        raise ItemsError(f"dense baseline {source.stem}: neither a baselines/ record under {roots} nor {source}")
    scores = json.loads(path.read_text())["eval"]
    values = {t: scores[t][m] for t, m in primary.items()}
    items = path.parent / "items.jsonl.gz" if found else source.with_name(source.stem + ".items.jsonl.gz")
    try:
        derived = task_values(item_frame(path, path=items, primary=primary).filter(pl.col("task").str.contains(":")))
    except ItemsError:
        derived = {}
    return values | derived


def _check_pairable(a: list[Run], b: list[Run]) -> list[int]:
    prints = {r.record["eval_meta"].get("fingerprint") for r in a + b}
    if len(prints) != 1:
        raise ItemsError(f"the two groups were scored on different suites (fingerprints {sorted(map(str, prints))})")
    seeds = sorted({r.seed for r in a} & {r.seed for r in b})
    if not seeds:
        raise ItemsError(
            f"no shared seed: A has seeds {sorted(r.seed for r in a)}, B has {sorted(r.seed for r in b)}; "
            "an unpaired difference is not what this tool reports"
        )
    return seeds


def _matrices(a: dict[int, Run], b: dict[int, Run], seeds: list[int], task: str):
    """(A, B, n): score matrices seeds × shared items of ``task`` (items keyed by id and document hash) and the
    items' token counts (one document, one count)."""
    keys = None
    for run in [a[s] for s in seeds] + [b[s] for s in seeds]:
        k = set(run.items.filter(pl.col("task") == task).select("item", "doc").iter_rows())
        keys = k if keys is None else keys & k
    keys = sorted(keys or ())
    if not keys:
        raise ItemsError(f"task {task}: the two groups share no item")

    def matrix(runs):
        rows = []
        for run in runs:
            frame = run.items.filter(pl.col("task") == task).select("item", "doc", "score")
            lookup = {(i, d): s for i, d, s in frame.iter_rows()}
            rows.append([lookup[k] for k in keys])
        return np.array(rows, dtype=np.float64)

    frame = b[seeds[0]].items.filter(pl.col("task") == task).select("item", "doc", "tokens")
    tokens = {(i, d): n for i, d, n in frame.iter_rows()}
    return matrix([a[s] for s in seeds]), matrix([b[s] for s in seeds]), np.array([tokens[k] for k in keys])


def _tokens(run: Run, task: str) -> float:
    return run.items.filter(pl.col("task") == task)["tokens"].mean()


def compare(a: list[Run], b: list[Run], dense: dict[str, float], tasks: list[str] | None = None) -> dict:
    """D, its components and interval, and the bootstrap check, for groups ``a`` and ``b`` (lists of runs)."""
    seeds = _check_pairable(a, b)
    by_a, by_b = {r.seed: r for r in a}, {r.seed: r for r in b}
    tasks = tasks or sorted(t for t in by_a[seeds[0]].values if ":" not in t)
    kinds = by_a[seeds[0]].items.group_by("task").agg(pl.col("kind").first(), pl.col("metric").first())
    kind = {t: (k, m) for t, k, m in kinds.iter_rows()}
    mats, c, diffs = {}, {}, {}
    for t in tasks:
        mats[t] = _matrices(by_a, by_b, seeds, t)
        n_bar = _tokens(by_a[seeds[0]], t)
        v_a, v_b = (np.mean([runs[s].values[t] for s in seeds]) for runs in (by_a, by_b))
        mid = slope(*kind[t], 0.5 * (v_a + v_b), n_bar)
        c[t] = 100.0 / (len(tasks) * dense[t]) * mid
        # each group linearised at its own value (the delta method per group), in units of the midpoint's slope:
        # a − b where the slopes agree (accuracy), and where they do not (a perplexity task far apart) still the
        # variance each group's items really carry
        k_a, k_b = (slope(*kind[t], v, n_bar) / mid for v in (v_a, v_b))
        ma, mb, n = mats[t]
        if kind[t][0] == "token":  # a ratio Σs/Σn: an item moves it by s_i − r·n_i (its tokens count too)
            ma, mb = (m - m.sum() / (m.shape[0] * n.sum()) * n for m in (ma, mb))
        diffs[t] = k_a * ma - k_b * mb
    per_seed = [
        100.0 * np.mean([by_a[s].values[t] / dense[t] - by_b[s].values[t] / dense[t] for t in tasks]) for s in seeds
    ]
    S = len(seeds)
    item_var, inter_var, per_task_seed = {}, {}, {}
    for t in tasks:
        d = diffs[t]
        n_items = d.shape[1]
        col = d.mean(axis=0)
        if S == 1:
            item_var[t], inter_var[t] = float(np.var(col, ddof=1)) if n_items > 1 else 0.0, 0.0
            continue
        row, grand = d.mean(axis=1), d.mean()
        ms_item = S * np.sum((col - grand) ** 2) / (n_items - 1)
        ms_seed = n_items * np.sum((row - grand) ** 2) / (S - 1)
        ms_res = np.sum((d - row[:, None] - col[None, :] + grand) ** 2) / ((S - 1) * (n_items - 1))
        inter_var[t] = float(ms_res)
        item_var[t] = float(max(0.0, (ms_item - ms_res) / S))
        per_task_seed[t] = float(max(0.0, (ms_seed - ms_res) / n_items)) * c[t] ** 2
    items = {t: mats[t][0].shape[1] for t in tasks}
    seed_var = float("nan")
    if S > 1:
        inter = sum(c[t] ** 2 * inter_var[t] / items[t] for t in tasks)
        seed_var = max(0.0, float(np.var(per_seed, ddof=1)) - inter)
    comp = Components(tasks, c, items, item_var, inter_var, seed_var, S, "items", per_task_seed)
    return {
        "seeds": seeds,
        "difference": float(np.mean(per_seed)),
        "per_seed": per_seed,
        "per_task": {
            t: float(np.mean([100.0 * (by_a[s].values[t] - by_b[s].values[t]) / dense[t] for s in seeds]))
            for t in tasks
        },
        "components": comp,
        "bootstrap": bootstrap(mats, {t: kind[t] for t in tasks}, dense, seeds),
        "skip": {
            "a": (np.mean([by_a[s].param_skip for s in seeds]), np.mean([by_a[s].compute_skip for s in seeds])),
            "b": (np.mean([by_b[s].param_skip for s in seeds]), np.mean([by_b[s].compute_skip for s in seeds])),
        },
    }


def with_record_seeds(comp: Components, a_retain: dict[int, float], b_retain: dict[int, float]) -> Components:
    """``comp`` with σ²_α,R from records without items: the variance over shared seeds of their Retain differences
    (it includes the seed × item interaction, so it bounds the seed component from above)."""
    shared = sorted(set(a_retain) & set(b_retain))
    if len(shared) < 2:
        raise ItemsError(f"--seed-records: need ≥ 2 shared seeds with Retain, found {shared}")
    diffs = [a_retain[s] - b_retain[s] for s in shared]
    comp.seed_var, comp.seed_source = float(np.var(diffs, ddof=1)), f"records (seeds {shared})"
    comp.seed_df = len(shared) - 1
    return comp


def bootstrap(
    mats: dict, kinds: dict[str, tuple[str, str]], dense: dict[str, float], seeds: list[int], draws: int = 2000
) -> dict:
    """Hierarchical bootstrap of D itself: seeds, then items within each task, the same draws for A and B; each
    drawn seed's task values recomputed from its drawn items (``items.task_value``: a perplexity task's exp of
    summed log-likelihood over summed tokens, not a linearisation), then Retain against ``dense``."""
    rng = np.random.default_rng(0)
    S, out = len(seeds), np.empty(draws)
    value = np.vectorize(task_value, excluded={0, 1, 4})
    for k in range(draws):
        s_idx = rng.integers(0, S, S)
        total = np.zeros(S)
        for t, (ma, mb, n) in mats.items():
            i_idx = rng.integers(0, ma.shape[1], ma.shape[1])
            tokens = n[i_idx].sum()
            for m, sign in ((ma, 1.0), (mb, -1.0)):
                sums = m[np.ix_(s_idx, i_idx)].sum(axis=1)
                total += sign * value(*kinds[t], sums, tokens, len(i_idx)) / dense[t]
        out[k] = 100.0 * total.mean() / len(mats)
    lo, hi = np.quantile(out, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {"std": float(out.std(ddof=1)), "lo": float(lo), "hi": float(hi), "draws": draws}


def design(
    comp: Components, target: float, cost: dict | None = None, max_seeds: int = 30, scales=(1, 2, 4, 8)
) -> list[dict]:
    """For each item scale k (items × k per task): the fewest seeds per group whose half-width ≤ ``target``, that
    half-width, and (with ``cost``: {"train_s", "eval_s_per_item": {task: s}}) the CPU-hours of both groups."""
    rows = []
    for scale in scales:
        found = next((s for s in range(2, max_seeds + 1) if comp.half_width(s, scale) <= target), None)
        row = {"items_x": scale, "items": {t: n * scale for t, n in comp.items.items()}, "seeds": found}
        row["half_width"] = comp.half_width(found or max_seeds, scale)
        if cost is not None and found is not None:
            per_run = cost["train_s"] + sum(
                cost["eval_s_per_item"].get(t.split(":")[0], 0.0) * n * scale for t, n in comp.items.items()
            )
            row["cpu_hours"] = 2 * found * per_run / 3600
        rows.append(row)
    return rows


def run_cost(runs: list[Run]) -> dict:
    """Training seconds and scoring seconds per item per task, averaged over ``runs`` (their records' own times)."""
    train, per_item = [], {}
    for run in runs:
        meta = run.record["eval_meta"]
        train.append(run.record["wall_time_s"] - meta["wall_time_s"])
        for t, spec in meta["tasks"].items():
            n = (spec.get("n_samples") or {}).get("effective")
            if n and spec.get("wall_time_s") is not None:
                per_item.setdefault(t, []).append(spec["wall_time_s"] / n)
    return {"train_s": float(np.mean(train)), "eval_s_per_item": {t: float(np.mean(v)) for t, v in per_item.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.paired", description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", help="record files or directories holding them")
    parser.add_argument("--a", required=True, help="group A selector, e.g. variant=full")
    parser.add_argument("--b", required=True, help="group B selector, e.g. variant=no_memory_read")
    parser.add_argument(
        "--tasks",
        help="tasks to compare, comma-separated (default: the Retain tasks); "
        "<task>:p_gold is the gold choice's probability, a continuous measure",
    )
    parser.add_argument("--at", type=float, help="compare at exactly this skip, through each run's curve")
    parser.add_argument("--axis", choices=("param", "compute"), default="param", help="the skip axis of --at")
    parser.add_argument(
        "--at-b",
        action="store_true",
        help="read each A run at exactly its same-seed B run's trained skip on --axis (B at its trained threshold): "
        "matched per seed where no one skip lies on every run's curve",
    )
    parser.add_argument(
        "--nearest",
        action="store_true",
        help="with --at-b: where A's curve does not reach B's trained skip, read both runs of that seed at the skip "
        "nearest it that both curves reach (B through its curve); the skip read is printed per seed",
    )
    parser.add_argument("--seed-records", nargs="*", default=[], help="records without items for the seed component")
    parser.add_argument(
        "--seed-std",
        type=float,
        help="the seed component from elsewhere: each group's Retain std over seeds (e.g. another study's); the "
        "difference's seed variance is then taken as 2·std² (the groups' seed effects independent: conservative)",
    )
    parser.add_argument("--seed-std-seeds", type=int, default=2, help="how many seeds --seed-std was measured on")
    parser.add_argument("--resolve", type=float, help="design: seeds × items that resolve this many Retain points")
    parser.add_argument(
        "--train-hours", type=float, help="design: CPU-hours to train one run (default: these runs' own training time)"
    )
    args = parser.parse_args(argv)
    try:
        runs = with_items(read_records(args.records))
        want_a, want_b = parse_selector(args.a), parse_selector(args.b)
        if args.at_b and args.at is not None:
            raise ItemsError(f"--at {args.at} and --at-b: give one (one skip for every run, or each B run's own)")
        if args.nearest and not args.at_b:
            raise ItemsError("--nearest reads a seed's pair near B's trained skip: it needs --at-b")
        if args.at_b:
            a, b, reads = pairs_at_b(runs, want_a, want_b, args.axis, args.nearest)
        else:
            a, b = ([load_run(p, args.at, args.axis, r) for p, r in runs if matches(r, w)] for w in (want_a, want_b))
        if not a or not b:
            raise ItemsError(f"--a {args.a}: {len(a)} runs with items, --b {args.b}: {len(b)}; each needs ≥ 1")
        dense = dense_values(a[0], args.records)
        result = compare(a, b, dense, args.tasks.split(",") if args.tasks else None)
        comp = result["components"]
        if args.seed_records:
            seed_records = read_records(args.seed_records)
            a_retain, b_retain = (
                {r["seed"]: r["retain"]["value"] for _, r in seed_records if matches(r, want)}
                for want in (want_a, want_b)
            )
            with_record_seeds(comp, a_retain, b_retain)
        if args.seed_std is not None:
            comp.seed_var, comp.seed_source = 2 * args.seed_std**2, f"--seed-std {args.seed_std:g} (2·std²)"
            comp.seed_df = args.seed_std_seeds - 1
    except (ItemsError, BaselineError, OSError, KeyError) as err:
        print(f"ERROR: {err}", file=sys.stderr)
        return 2
    print(report(result, args, a + b))
    if args.nearest:
        print(
            f"per seed, the {args.axis} skip read (B's trained, A's trained): "
            + ", ".join(
                f"{s}: {100 * x:.2f} % ({100 * tb:.2f}, {100 * ta:.2f})" for s, (x, tb, ta) in sorted(reads.items())
            )
        )
    elif args.at_b:
        print(
            "per seed, B's trained skip (param / net compute): "
            + ", ".join(
                f"{r.seed}: {100 * r.param_skip:.2f} / {100 * r.compute_skip:.2f} %"
                for r in sorted(b, key=lambda r: r.seed)
            )
        )
    return 0


def report(result: dict, args, runs: list[Run]) -> str:
    comp = result["components"]
    if args.nearest:
        axis = f"both read per seed at B's trained {args.axis} skip or the nearest skip both curves reach"
    elif args.at_b:
        axis = f"A matched per seed to B's trained {args.axis} skip"
    elif args.at is not None:
        axis = f"matched at {args.at:.4g} {args.axis} skip"
    else:
        axis = "at each run's trained threshold"
    lines = [
        f"A = {args.a}, B = {args.b}; {axis}; shared seeds {result['seeds']}; items per task {comp.items}",
        f"skip A: param {result['skip']['a'][0]:.4f}, net compute {result['skip']['a'][1]:.4f}; "
        f"B: param {result['skip']['b'][0]:.4f}, net compute {result['skip']['b'][1]:.4f}",
        f"D = Retain(A) − Retain(B) = {result['difference']:+.2f} (per seed {', '.join(f'{x:+.2f}' for x in result['per_seed'])})",
    ]
    if not math.isnan(comp.seed_var):
        seed, item, inter = comp.variance(comp.seeds)
        lines.append(
            f"95 % half-width ±{comp.half_width(comp.seeds, seed_df=comp.seed_df):.2f}; variance: seed {seed:.3f}, item {item:.3f}, "
            f"seed×item {inter:.3f} (seed component from {comp.seed_source})"
        )
    else:
        lines.append(f"one shared seed: item component {comp.variance(1)[1]:.3f} (incl. seed×item); no seed component")
    boot = result["bootstrap"]
    lines.append(f"bootstrap (seeds, items): std {boot['std']:.2f}, 95 % [{boot['lo']:+.2f}, {boot['hi']:+.2f}]")
    lines.append("task              D_t    c_t      σ²_item     σ²_seed×item   items")
    for t in comp.tasks:
        lines.append(
            f"{t:16s} {result['per_task'][t]:+6.2f} {comp.c[t]:8.3g} {comp.item_var[t]:11.4g} {comp.inter_var[t]:13.4g} {comp.items[t]:7d}"
        )
    if args.resolve and not math.isnan(comp.seed_var):
        lines.append(f"design for ±{args.resolve:g} Retain points (cost from these runs' own times):")
        cost = run_cost(runs)
        if args.train_hours is not None:
            cost["train_s"] = 3600 * args.train_hours
        lines.append(
            f"  per run: training {cost['train_s'] / 3600:.2f} h, scoring "
            + ", ".join(
                f"{t} {s:.2f} s/item"
                for t, s in cost["eval_s_per_item"].items()
                if t in {x.split(":")[0] for x in comp.items}
            )
        )
        for row in design(comp, args.resolve, cost):
            spent = f", {row['cpu_hours']:.1f} CPU-h" if "cpu_hours" in row else ""
            lines.append(
                f"  items ×{row['items_x']}: seeds per group {row['seeds'] or '> 30'} (±{row['half_width']:.2f}){spent}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
