"""``python -m analysis.report <dirs…> --out <dir>``: every table, curve, plot and a summary from run records.

Reads every ``results.json`` under the given directories (multirun dirs, calibration
dirs, copies from a cluster), lists failed and incomplete runs, and writes to ``--out``:

* ``table{1..4}_<name>.{md,csv,tex}`` and ``…_paired.csv`` — the paper's Tables 1–4
  (``analysis.tables``), each with its named Retain baseline and task set;
* ``groups.csv`` — seed statistics of every group (Retain against ``--curve-baseline``),
  including runs without task scores (skip statistics only), and ``retain_chance`` (chance-normalised
  Retain as each run recorded it, ``hero.statistics.chance_normalised``) when records carry it;
* ``curves.csv``, ``matched_skip.{csv,md}``, ``curve_areas.csv``, ``skip_adjusted.csv`` —
  quality–cost curves, comparisons at matched skip (by default at the reference curve's
  points, or at the calibration targets when runs used ``alpha=calibrated``), areas between
  curves, and every run against the reference curve at its own skip, with t intervals
  (``analysis.curves``);
* ``calibration.{csv,md}`` when runs used ``alpha=calibrated``: realized skip per seed
  against the target;
* ``latency.csv`` when records carry benchmark figures: every benchmark record with
  the quality of the run it measured (``analysis.latency``);
* ``resolution.{csv,md}`` — every paired comparison of two or more seeds (tables' rows against
  their baselines, skip-adjusted groups against the reference curve): half-width, whether it
  is resolved, and the seeds 1 / 2 / 5 Retain points would need (``analysis.resolution``);
* ``budget.{csv,md}`` — wall time summed over runs and CPU time (× threads), per group and in
  all (``analysis.budget``);
* ``training_budget.{csv,md}`` and ``retain_vs_updates.png`` when trained runs span two or more
  training lengths: Retain and skip per (method, skip level, updates), HeRo − SkipGPT-RT paired by seed
  (``analysis.training_budget``);
* with ``--skip-axis net_compute``, the curves, ``groups.csv`` and the matched-skip and skip-adjusted
  comparisons use the net compute skip (``skip.net_compute_rate``: FFN FLOPs saved minus router and
  adapter FLOPs, ``hero.model.flops``) instead of the parameter skip; the paper tables and the
  calibration table keep the parameter skip;
* ``training_trajectory.{csv,png}`` when records carry training curves: each run's training-batch parameter
  skip and loss per window of updates, calibration trials included (``analysis.trajectory``);
* ``problems.{csv,md}`` — failed, incomplete, invalid, unreadable and duplicate runs;
* PNG plots (``analysis.plots``) and ``summary.json``;
* with ``--notebooks``, the executed analysis notebooks under ``notebooks/``;
* with ``--wandb-project``, the tables pushed to a W&B run.

A baseline selector that matches no group, or several, skips that table (or the curves)
with one line naming the option, the selector, the groups that exist and the
``train.py`` command that would provide the baseline; every other output is written.
The main setting (α or calibration target, memory dim, layer set) comes from the records
unless given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import polars as pl

from analysis.budget import budget_markdown, budget_table
from analysis.curves import area_between, curve_points, curves, matched_skip, reference_curves, skip_adjusted
from analysis.latency import latency_table
from analysis.load import KEYS, Runs, load_runs
from analysis.reference import BaselineError, parse_selector, resolve_baselines, with_retain
from analysis.resolution import comparisons, resolution_markdown
from analysis.stats import summarize
from analysis.tables import Table, build_table, close_to, paper_tables
from analysis.training_budget import has_budgets
from analysis.training_budget import write as write_training_budget
from analysis.trajectory import write as write_trajectory

PAPER_MAIN = {"alpha": 1e-3, "memory_dim": 64, "layer_set": "second_half"}
"""The paper's main setting (HERO_SPEC §8): only a tie-break when the records do not decide."""
TRAIN_OVERRIDE = {
    "method": "method",
    "variant": "ablation",
    "alpha": "alpha",
    "memory_dim": "router.memory_dim",
    "layer_set": "layers",
    "seed": "seed",
    "backbone": "model",
}
"""Run field → the ``train.py`` override that sets it (for the command that provides a missing baseline)."""
METHOD_OPTIONS = frozenset(p.stem for p in (Path(__file__).resolve().parents[1] / "conf" / "method").glob("*.yaml"))
"""The ``method=`` options (``conf/method/``): a non-HeRo run's variant is its method option, not an ablation."""

SELECTOR_HELP = """\
Baselines. Every Retain is 100 x the mean over the task set of (score / baseline score),
against a NAMED baseline chosen by a selector: key=value[,key=value...] over run fields
(method, variant, alpha, memory_dim, layer_set, seed, router.memory_read, ...). A table's
selector is applied to that table's rows, the curve baseline to all scored runs; it must
pick exactly one group (backbone, method, variant, alpha, memory_dim, layer_set) per
backbone, else the report stops with an error listing the groups there. Table rows:
  1 main         every non-HeRo method + full HeRo at the main alpha and memory dim
  2 alpha_sweep  full HeRo at the main memory dim and layer set, one row per alpha
  3 ablations    HeRo variants at the main alpha, memory dim and layer set
  4 memory_dim   full HeRo at the main alpha and layer set, one row per memory dim
("at the main alpha" reads "at the main calibration target" when there is one, below.)
The task set is every task the baseline scores in all its seeds (or --tasks); it is
printed with every table, in every format. A table (or the curves) whose baseline is
missing or ambiguous is skipped with one line naming the run that would provide it;
everything else is still written.

Main setting. --main-alpha, --main-memory-dim and --main-layer-set default to the
records: the value the scored HeRo runs share when there is one, else the value the
most HeRo groups (variant x alpha x memory dim x layer set) share, ties going to the
paper's (alpha 1e-3, memory dim 64, second_half); the choice is printed. When HeRo
runs used alpha=calibrated, each variant has its own alpha at the same realized skip: when
more HeRo groups are calibrated to one target than share the main alpha, the main setting
is that calibration target (or --main-target), Tables 1, 3 and 4 take the HeRo runs calibrated to it whatever
their alpha, and the main alpha (Table 2's baseline) is full HeRo's calibrated alpha;
--main-target none keeps the alpha selection."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m analysis.report",
        description=__doc__.split("\n\n")[0],
        epilog=SELECTOR_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dirs", nargs="+", help="directories (searched recursively) or results.json files")
    p.add_argument("--out", required=True, type=Path, help="output directory (created)")
    p.add_argument("--tables", default="1,2,3,4", help="which paper tables to build (default: 1,2,3,4)")
    p.add_argument(
        "--main-alpha", type=float, help="α of the main setting (default: from the records, see MAIN SETTING below)"
    )
    p.add_argument(
        "--main-target",
        metavar="SKIP",
        help="calibration target (realized skip, e.g. 0.2) of the main setting, or 'none' "
        "(default: from the records when HeRo runs used alpha=calibrated)",
    )
    p.add_argument("--main-memory-dim", type=int, help="memory dim of the main setting (default: from the records)")
    p.add_argument("--main-layer-set", help="layer set of the main setting (default: from the records)")
    p.add_argument(
        "--baseline-table1",
        metavar="SEL",
        default="method=dense",
        help="Retain baseline of Table 1, main results (default: method=dense, the Dense run or the "
        "dense record every evaluated run writes under <outputs>/baselines/)",
    )
    p.add_argument(
        "--baseline-table2", metavar="SEL", help="Retain baseline of Table 2, α sweep (default: alpha=<main α>)"
    )
    p.add_argument(
        "--baseline-table3",
        metavar="SEL",
        default="variant=full",
        help="Retain baseline of Table 3, ablations (default: variant=full, full HeRo)",
    )
    p.add_argument(
        "--baseline-table4",
        metavar="SEL",
        help="Retain baseline of Table 4, memory dim (default: memory_dim=<main dim>, the 64-dim run)",
    )
    p.add_argument(
        "--curve-baseline",
        metavar="SEL",
        default="method=dense",
        help="Retain baseline of the quality–cost curves and groups.csv (default: method=dense)",
    )
    p.add_argument(
        "--curve-reference",
        metavar="SEL",
        help="curve the others are compared with at matched skip (default: "
        "method=hero,variant=full,memory_dim=<main dim>,layer_set=<main layer set>)",
    )
    p.add_argument(
        "--matched-skip",
        metavar="PCTS",
        help="comma-separated skip rates in %% for matched comparisons (default: the reference curve's points)",
    )
    p.add_argument(
        "--skip-axis",
        choices=SKIP_AXES,
        default="param",
        help="the cost axis of the curves, groups.csv, matched-skip and skip-adjusted comparisons: param (the "
        "paper's parameter skip, skip.param_rate; default) or net_compute (FFN FLOPs saved minus router and "
        "adapter FLOPs, skip.net_compute_rate; records without it are left out, see python -m analysis.compute)",
    )
    p.add_argument("--tasks", help="comma-separated task set for Retain (default: every task the baseline scores)")
    p.add_argument("--level", type=float, default=0.95, help="confidence level of the t intervals (default: 0.95)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--notebooks", action="store_true", help="also execute analysis/notebooks/*.py into <out>/notebooks")
    p.add_argument("--wandb-project", help="push the tables to a W&B run in this project (mode from WANDB_MODE)")
    p.add_argument("--wandb-entity", help="W&B entity for --wandb-project")
    return p


def run_report(args: argparse.Namespace) -> dict:
    """Write every output of the module docstring under ``args.out``; return the summary (also in summary.json)."""
    parse_target(args.main_target)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    runs = load_runs(args.dirs)
    frame = runs.records.collect()
    tasks = args.tasks.split(",") if args.tasks else None
    summary = {
        "inputs": [str(d) for d in args.dirs],
        "counts": runs.counts(),
        "tasks": runs.tasks,
        "problems": runs.problems.to_dicts(),
        "notes": list(runs.notes),
        "tables": {},
        "files": [],
    }
    files: list[Path] = summary["files"]
    files += _write_problems(runs, out)
    if frame.height == 0:
        summary["notes"].append("no completed records: no tables, curves or plots")
        return _finish(summary, out)

    if "wall_time_s" in frame.columns:
        cost = budget_table(frame)
        files += [_csv(cost, out / "budget.csv"), out / "budget.md"]
        (out / "budget.md").write_text(budget_markdown(cost))
        summary["budget"] = cost.filter(pl.col("method") == "total").select("n", "job_s", "cpu_s").to_dicts()[0]
    else:
        summary["notes"].append("no record carries wall_time_s: no budget table")

    for selector in (
        args.baseline_table1,
        args.baseline_table2,
        args.baseline_table3,
        args.baseline_table4,
        args.curve_baseline,
        args.curve_reference,
    ):
        if selector:
            parse_selector(selector)
    main = main_setting(frame, args)
    summary["main_setting"] = main
    alpha, dim, layer_set, target = main["alpha"], main["memory_dim"], main["layer_set"], main["target"]
    baselines = {
        1: args.baseline_table1,
        2: args.baseline_table2 or f"alpha={alpha!r}",
        3: args.baseline_table3,
        4: args.baseline_table4 or f"memory_dim={dim}",
    }
    wanted = {int(n) for n in args.tables.split(",")}
    built: list[Table] = []
    for spec in paper_tables(alpha, dim, layer_set, baselines, main_target=target):
        if spec.number not in wanted:
            continue
        try:
            table = build_table(frame, spec, runs.tasks, tasks, args.level)
        except BaselineError as err:
            summary["tables"][spec.stem] = {"skipped": f"{err}; {provider_hint(spec.baseline, spec.number, main)}"}
            continue
        if table is None:
            reason = f"no completed run with task scores matches its rows ({spec.rows})"
            summary["tables"][spec.stem] = {"skipped": reason}
            continue
        built.append(table)
        files += table.write(out)
        summary["tables"][spec.stem] = {
            "rows": table.stats.height,
            "runs": table.runs.height,
            "row_filter": spec.rows,
            "baseline": {
                b: {
                    "option": x.option,
                    "selector": x.selector,
                    "group": x.label,
                    "seeds": list(x.seeds),
                    "task_set": {t: runs.tasks[t] for t in x.tasks},
                }
                for b, x in table.baselines.items()
            },
            "values": table.stats.select(
                *KEYS, "n", *(f"{m}.{s}" for m in ("retain", "skip", "avg") for s in ("mean", "std", "ci_lo", "ci_hi"))
            ).to_dicts(),
            "notes": table.notes,
        }

    calibrated = calibration_table(frame)
    if calibrated.height:
        files += [_csv(calibrated, out / "calibration.csv"), out / "calibration.md"]
        (out / "calibration.md").write_text(_calibration_markdown(calibrated))
        summary["calibration"] = calibrated.to_dicts()
    files += write_trajectory(frame, out, plots=not args.no_plots)

    if args.skip_axis == "net_compute":
        frame, note = net_compute_axis(frame)
        summary["skip_axis"] = "net_compute"
        summary["notes"].append(note)
    skip_pct = (pl.col("skip.param_rate") * 100.0).alias("skip")
    try:
        curve_base = resolve_baselines(frame, args.curve_baseline, "--curve-baseline", runs.tasks, tasks)
    except BaselineError as err:
        summary["curves"] = {"skipped": f"{err}; {provider_hint(args.curve_baseline, None, main)}"}
        files.append(_csv(summarize(frame.with_columns(skip_pct), ["skip"], level=args.level), out / "groups.csv"))
        if not args.no_plots:
            summary["plots"] = _plots(frame.filter(pl.col("scored")), None, None, [], out, (alpha, dim, layer_set))
            files += [Path(p) for p in summary["plots"].values() if p]
        return _finish_extras(args, built, summary, out, files)
    scored = with_retain(frame, curve_base)
    task_cols = list(dict.fromkeys(f"score.{t}" for b in curve_base.values() for t in b.tasks))
    scored = scored.with_columns(*(pl.col(c) * 100.0 for c in task_cols))
    # Chance-normalised Retain as the run recorded it (against its dense baseline): a column only when records carry it.
    chance_cols = ["retain_chance"] if "retain_chance.value" in scored.columns else []
    if chance_cols:
        scored = scored.with_columns(
            pl.col("retain_chance.value").cast(pl.Float64, strict=False).alias("retain_chance")
        )
    groups = summarize(scored.with_columns(skip_pct), ["skip", "retain", *chance_cols, *task_cols], level=args.level)
    named = _baseline_columns(curve_base, runs.tasks)
    files.append(_csv(named(groups), out / "groups.csv"))

    latency = latency_table(scored, ["retain", *task_cols])
    scored = scored.filter(pl.col("scored"))
    if has_budgets(scored):
        files += write_training_budget(scored, out, plots=not args.no_plots)
    points = curve_points(scored, ["retain", *task_cols], level=args.level)
    files.append(_csv(named(points), out / "curves.csv"))
    reference = args.curve_reference or f"method=hero,variant=full,memory_dim={dim},layer_set={layer_set}"
    levels = [float(v) for v in args.matched_skip.split(",")] if args.matched_skip else None
    if levels is None and calibrated.height and args.skip_axis == "param":
        levels = sorted(set((100.0 * calibrated["target"]).round(6).to_list()))
    metric_curves = {m: curves(points, m, scored) for m in ["retain", *task_cols]}
    try:
        refs = {m: reference_curves(c, reference) for m, c in metric_curves.items()}
    except BaselineError as err:
        summary["curves"] = {"skipped": f"matched-skip comparisons: {err}"}
        refs = {m: {} for m in metric_curves}
    matched = pl.concat([matched_skip(c, refs[m], levels) for m, c in metric_curves.items()])
    areas = pl.concat([area_between(c, refs[m]) for m, c in metric_curves.items()])
    adjusted = pl.concat([skip_adjusted(c, refs[m], args.level) for m, c in metric_curves.items()])
    files += [
        _csv(named(matched), out / "matched_skip.csv"),
        _csv(named(areas), out / "curve_areas.csv"),
        _csv(named(adjusted), out / "skip_adjusted.csv"),
    ]
    (out / "matched_skip.md").write_text(
        _matched_markdown(matched, areas, adjusted, curve_base, reference, runs.tasks, args.level, args.skip_axis)
    )
    files.append(out / "matched_skip.md")
    summary.setdefault("curves", {}).update(
        {
            "retain_baseline": {
                b: {"selector": x.selector, "group": x.label, "task_set": {t: runs.tasks[t] for t in x.tasks}}
                for b, x in curve_base.items()
            },
            "reference": {b: {"selector": reference, "curve": c.label} for b, c in refs["retain"].items()},
            "matched_skip_retain": matched.filter(pl.col("metric") == "retain").to_dicts(),
            "areas_retain": areas.filter(pl.col("metric") == "retain").to_dicts(),
            "skip_adjusted_retain": adjusted.filter(pl.col("metric") == "retain").to_dicts(),
        }
    )
    if latency.height:
        files.append(_csv(named(latency), out / "latency.csv"))
    else:
        summary["notes"].append("no record carries benchmark figures (bench): no latency table or plot")

    if not args.no_plots:
        summary["plots"] = _plots(scored, points, latency, task_cols, out, (alpha, dim, layer_set))
        files += [Path(p) for p in summary["plots"].values() if p]
    return _finish_extras(args, built, summary, out, files, adjusted)


def _finish_extras(
    args: argparse.Namespace,
    built: list[Table],
    summary: dict,
    out: Path,
    files: list,
    adjusted: pl.DataFrame | None = None,
) -> dict:
    found = comparisons(built, adjusted)
    files += [_csv(found, out / "resolution.csv"), out / "resolution.md"]
    (out / "resolution.md").write_text(resolution_markdown(found, args.level))
    summary["resolution"] = found.to_dicts()
    if args.notebooks:
        from analysis.execute import execute_all

        files += execute_all(args.dirs, out / "notebooks")
    if args.wandb_project:
        summary["wandb"] = push_wandb(built, summary, args.wandb_project, args.wandb_entity)
    return _finish(summary, out)


def main_setting(frame: pl.DataFrame, args: argparse.Namespace) -> dict:
    """α, memory dim and layer set of the main setting: the CLI value, else from the records (see the epilog)."""
    hero = frame.filter(pl.col("method") == "hero")
    if hero.filter(pl.col("scored")).height:
        hero = hero.filter(pl.col("scored"))
    given = {"alpha": args.main_alpha, "memory_dim": args.main_memory_dim, "layer_set": args.main_layer_set}
    out = {}
    for key, value in given.items():
        if value is not None:
            out[key] = value
            continue
        best = most_shared(hero, key, prefer=PAPER_MAIN[key])
        out[key] = PAPER_MAIN[key] if best is None else best
    out["target"], target_source = main_target(hero, args.main_target)
    if target_source == "records" and out["target"] is not None:
        at_alpha = hero.filter(close_to("alpha", out["alpha"])).select(KEYS).unique().height
        at_target = hero.filter(close_to("calibration.target", out["target"])).select(KEYS).unique().height
        if at_target <= at_alpha:  # more (or as many) HeRo groups share the main α: it stays the main setting
            out["target"] = None
    if args.main_alpha is None and out["target"] is not None:
        full_at_target = hero.filter((pl.col("variant") == "full") & close_to("calibration.target", out["target"]))
        alphas = full_at_target["alpha"].unique().to_list()
        if len(alphas) == 1:  # Table 2's baseline: full HeRo at its calibrated α
            out["alpha"] = alphas[0]
    out["source"] = {k: "option" if v is not None else "records" for k, v in given.items()}
    out["source"]["target"] = target_source
    return out


def parse_target(option: str | None) -> float | None | str:
    """``--main-target`` as a skip rate in (0, 1), ``None`` for ``none``, or ``"records"`` when not given."""
    if option is None:
        return "records"
    if option.strip().lower() == "none":
        return None
    try:
        value = float(option)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise ValueError(f"--main-target {option!r}: expected a realized skip rate in (0, 1), e.g. 0.2, or 'none'")
    return value


def main_target(hero: pl.DataFrame, option: str | None) -> tuple[float | None, str]:
    """The calibration target of the main setting and where it came from: ``--main-target``
    (a skip rate in (0, 1), or ``none``), else the target the most calibrated HeRo groups share."""
    given = parse_target(option)
    if given != "records":
        if given is not None and "calibration.target" not in hero.columns:
            raise ValueError(f"--main-target {option}: no HeRo run in these records used alpha=calibrated")
        return given, "option"
    if "calibration.target" not in hero.columns:
        return None, "records"
    return most_shared(
        hero.with_columns(pl.col("calibration.target").cast(pl.Float64)), "calibration.target"
    ), "records"


def most_shared(runs: pl.DataFrame, column: str, prefer: object = None):
    """The value of ``column`` that the most groups (``KEYS``) share, then the most runs, then ``prefer``,
    then the smallest (whatever order group_by gave); ``None`` when no run has one."""
    counts = (
        runs.filter(pl.col(column).is_not_null())
        .group_by(column)
        .agg(pl.struct(*KEYS).n_unique().alias("groups"), pl.len().alias("runs"))
        .to_dicts()
    )
    counts.sort(key=lambda r: r[column])
    best = max(counts, key=lambda r: (r["groups"], r["runs"], r[column] == prefer), default=None)
    return None if best is None else best[column]


def provider_hint(selector: str, table: int | None, main: dict) -> str:
    """The ``train.py`` command whose run the baseline ``selector`` would select (at the table's main setting)."""
    fields = parse_selector(selector)
    overrides = {TRAIN_OVERRIDE[k]: v for k, v in fields.items() if k in TRAIN_OVERRIDE}
    if overrides.get("ablation") in METHOD_OPTIONS:
        overrides["method"] = overrides.pop("ablation")
    if overrides.get("method", "hero") == "hero" and table in (2, 3, 4):
        overrides.setdefault("alpha", repr(main["alpha"]))
        overrides.setdefault("router.memory_dim", str(main["memory_dim"]))
        overrides.setdefault("layers", str(main["layer_set"]))
    command = " ".join(f"{k}={v}" for k, v in overrides.items())
    return f"a run of `python train.py {command}` would provide it"


SKIP_AXES = ("param", "net_compute")
AXIS_NAMES = {
    "param": "parameter skip (`skip.param_rate`, the paper's: skipped FFN parameters per token over all parameters)",
    "net_compute": "net compute skip (`skip.net_compute_rate`: FFN FLOPs saved minus router and adapter FLOPs)",
}


def net_compute_axis(frame: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """``frame`` with ``skip.param_rate`` replaced by the net compute skip (the parameter skip kept as
    ``skip.param_rate_param``), and a note naming the records left out.

    Every record written since ``hero.scoring`` carries ``skip.net_compute_rate``, whatever its method. An older
    record without it that has no router (``router_params`` null) and ran every routable FFN skips nothing and
    pays nothing: 0 (dense, LoRA). Any other record without it is left out (``python -m analysis.compute``
    computes it from the record and the backbone's shape).
    """
    col = "skip.net_compute_rate"
    if col not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    rates = [c for c in frame.columns if c.startswith("skip.per_layer_ffn_rate.")]
    ran_every_ffn = pl.all_horizontal(pl.col(c).fill_null(1.0) == 1.0 for c in rates) if rates else pl.lit(True)
    counts = [c for c in frame.columns if c == "router_params" or c.startswith("router_params.")]
    unrouted = pl.all_horizontal(pl.col(c).is_null() for c in counts) if counts else pl.lit(True)
    free = (unrouted & ran_every_ffn).fill_null(False)
    frame = frame.with_columns(
        pl.when(pl.col(col).is_null() & free).then(pl.lit(0.0)).otherwise(pl.col(col).cast(pl.Float64)).alias(col)
    )
    lacking = frame.filter(pl.col(col).is_null())
    kept = frame.filter(pl.col(col).is_not_null()).with_columns(
        pl.col("skip.param_rate").alias("skip.param_rate_param"), pl.col(col).alias("skip.param_rate")
    )
    note = "cost axis: net compute skip (skip.net_compute_rate), not the parameter skip"
    if lacking.height:
        note += f"; {lacking.height} records without skip.net_compute_rate (written before it) left out: " + ", ".join(
            sorted(set(lacking["method"].to_list()))
        )
    return kept, note


def calibration_table(frame: pl.DataFrame) -> pl.DataFrame:
    """Runs at a calibrated α (``alpha=calibrated``): realized skip per seed against the target, in pp."""
    if "calibration.target" not in frame.columns:
        return pl.DataFrame()
    runs = frame.filter(pl.col("calibration.target").is_not_null())
    if runs.height == 0:
        return pl.DataFrame()
    return runs.select(
        "backbone",
        "method",
        "variant",
        "layer_set",
        "memory_dim",
        pl.col("calibration.target").cast(pl.Float64).alias("target"),
        "alpha",
        "seed",
        (pl.col("skip.param_rate") * 100.0).alias("realized_skip_pct"),
        ((pl.col("skip.param_rate") - pl.col("calibration.target")) * 100.0).alias("deviation_pp"),
        (pl.col("calibration.tolerance").cast(pl.Float64) * 100.0).alias("tolerance_pp"),
    ).sort("backbone", "variant", "target", "seed")


def _calibration_markdown(calibrated: pl.DataFrame) -> str:
    lines = [
        "# Realized skip per seed at the calibrated α",
        "",
        "Each variant ran at the α calibrated (at one seed) for the target; the other seeds land beside it. "
        "Compare variants at the target with `matched_skip.md` (interpolation along each variant's own curve), "
        "not cell by cell.",
        "",
        "| backbone | variant | target % | α | seed | realized skip % | deviation pp |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in calibrated.iter_rows(named=True):
        lines.append(
            f"| {r['backbone']} | {r['variant']} | {100 * r['target']:.2f} | {r['alpha']:.4g} | {r['seed']} | "
            f"{r['realized_skip_pct']:.2f} | {r['deviation_pp']:+.2f} |"
        )
    spread = calibrated.group_by("backbone", "variant", "target", maintain_order=True).agg(
        pl.len().alias("n"),
        pl.col("deviation_pp").mean().alias("mean"),
        pl.col("deviation_pp").std().alias("std"),
        pl.col("deviation_pp").abs().max().alias("max_abs"),
    )
    lines += [
        "",
        "| backbone | variant | target % | seeds | mean deviation pp | std pp | max |deviation| pp |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in spread.iter_rows(named=True):
        std = "–" if r["std"] is None else f"{r['std']:.2f}"
        lines.append(
            f"| {r['backbone']} | {r['variant']} | {100 * r['target']:.2f} | {r['n']} | {r['mean']:+.2f} | "
            f"{std} | {r['max_abs']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def _plots(
    scored: pl.DataFrame,
    points: pl.DataFrame | None,
    latency: pl.DataFrame | None,
    task_cols: list[str],
    out: Path,
    main: tuple,
) -> dict:
    from analysis import plots

    hero = scored.filter(pl.col("method") == "hero")
    metrics = {"retain": "Retain (%)", **{c: f"{c.removeprefix('score.')} (×100)" for c in task_cols}}
    made = {}
    if points is not None:  # None: no Retain baseline, so no quality axis
        made["quality_cost"] = plots.quality_cost(points, metrics, out / "quality_cost.png", scored)
        made["quality_latency"] = plots.quality_latency(latency, "retain", "Retain (%)", out / "quality_latency.png")
    made["ffn_usage_heatmap"] = plots.ffn_usage_heatmap(hero, out / "ffn_usage_heatmap.png")
    made["per_token_skip"] = plots.per_token_skip(hero, out / "per_token_skip.png", *main)
    made["rho_per_layer"] = plots.rho_per_layer(hero, out / "rho_per_layer.png", *main)
    return {k: (str(v) if v else None) for k, v in made.items()}


def _write_problems(runs: Runs, out: Path) -> list[Path]:
    csv = _csv(runs.problems, out / "problems.csv")
    counts = runs.counts()
    lines = [
        f"# Runs found: {counts['found']}; completed: {counts['completed']}; "
        + "; ".join(f"{k}: {v}" for k, v in counts.items() if k not in ("found", "completed")),
        "",
    ]
    if runs.problems.height:
        lines += ["| kind | path | reason |", "|---|---|---|"]
        lines += [f"| {r['kind']} | {r['path']} | {r['reason']} |" for r in runs.problems.iter_rows(named=True)]
    else:
        lines.append("No failed, incomplete, invalid, unreadable or duplicate runs.")
    md = out / "problems.md"
    md.write_text("\n".join(lines) + "\n")
    return [csv, md]


def _matched_markdown(
    matched: pl.DataFrame,
    areas: pl.DataFrame,
    adjusted: pl.DataFrame,
    base: dict,
    reference: str,
    metrics: dict,
    level: float,
    axis: str = "param",
) -> str:
    lines = [
        "# Quality at matched skip (monotone fit, interpolated; no extrapolation)",
        "",
        f"Cost axis (`--skip-axis`): {AXIS_NAMES[axis]}.",
        "",
        f"Reference curve: `{reference}`. Retain baselines: " + "; ".join(x.describe(metrics) for x in base.values()),
        "",
        "| backbone | curve | metric | skip % | quality | reference | difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in matched.iter_rows(named=True):
        if r["in_range"]:
            q = f"{r['quality']:.2f} | {r['reference_quality']:.2f} | {r['difference']:+.2f}"
        else:
            q = "out of range | – | –"
        lines.append(
            f"| {r['backbone']} | {r['method']}/{r['variant']} d_m={r['memory_dim']} {r['layer_set']} | "
            f"{r['metric']} | {r['skip']:.2f} | {q} |"
        )
    lines += [
        "",
        "Area between each curve and the reference over their common skip interval "
        "(∫ (curve − reference) d skip%, and the mean gap = area / width):",
        "",
        "| backbone | curve | metric | skip interval % | area | mean gap |",
        "|---|---|---|---|---|---|",
    ]
    for r in areas.iter_rows(named=True):
        area = "no overlap | –" if r["area"] is None else f"{r['area']:.3f} | {r['mean_gap']:+.3f}"
        lines.append(
            f"| {r['backbone']} | {r['method']}/{r['variant']} d_m={r['memory_dim']} {r['layer_set']} | "
            f"{r['metric']} | {r['skip_lo']:.2f}–{r['skip_hi']:.2f} | {area} |"
        )
    lines += [
        "",
        "Skip-adjusted difference: each run of a curve minus the reference fit at that run's own realized "
        f"skip, mean ± std over the runs inside the reference's range, {100 * level:g} % t interval (it leaves "
        "out the reference fit's own error, of the order of the reference runs' residual std):",
        "",
        "| backbone | curve | metric | runs (outside) | difference | interval | reference residual std |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in adjusted.iter_rows(named=True):
        diff = "–" if r["mean"] is None else f"{r['mean']:+.2f}" + ("" if r["std"] is None else f" ± {r['std']:.2f}")
        ci = "–" if r["ci_lo"] is None else f"{r['ci_lo']:+.2f} to {r['ci_hi']:+.2f}"
        ref_std = "–" if r["reference_resid_std"] is None else f"{r['reference_resid_std']:.2f}"
        lines.append(
            f"| {r['backbone']} | {r['method']}/{r['variant']} d_m={r['memory_dim']} {r['layer_set']} | "
            f"{r['metric']} | {r['n']} ({r['n_outside']}) | {diff} | {ci} | {ref_std} |"
        )
    return "\n".join(lines) + "\n"


def push_wandb(tables: list[Table], summary: dict, project: str, entity: str | None) -> dict:
    """Log every table (as displayed, plus its caption) and the run counts to one W&B run of job type ``analysis``."""
    import wandb

    # WANDB_MODE and WANDB_DIR are passed on explicitly: after an earlier run in the same process (a notebook
    # that also trained), wandb 0.31 keeps that run's settings and would ask for an API key even offline.
    run = wandb.init(
        project=project,
        entity=entity,
        job_type="analysis",
        config={"inputs": summary["inputs"]},
        mode=os.environ.get("WANDB_MODE") or None,
        dir=os.environ.get("WANDB_DIR") or None,
    )
    for t in tables:
        df = t.display()
        run.log({t.spec.stem: wandb.Table(columns=df.columns, data=[list(r) for r in df.rows()])})
        run.summary[f"{t.spec.stem}/caption"] = "\n".join(t.caption())
    for k, v in summary["counts"].items():
        run.summary[f"runs/{k}"] = v
    info = {"run_id": run.id, "project": project, "mode": str(run.settings.mode)}
    run.finish()
    return info


def _baseline_columns(baselines: dict, metrics: dict[str, str]):
    """A function adding ``retain_baseline`` and ``task_set`` columns (per backbone) to a frame with Retain."""
    label = {b: f"{x.label} ({x.selector})" for b, x in baselines.items()}
    task_set = {b: " ".join(f"{t}:{metrics[t]}" for t in x.tasks) for b, x in baselines.items()}

    def add(df: pl.DataFrame) -> pl.DataFrame:
        if df.height == 0:
            return df
        return df.with_columns(
            pl.col("backbone").replace_strict(label, default=None).alias("retain_baseline"),
            pl.col("backbone").replace_strict(task_set, default=None).alias("task_set"),
        )

    return add


def _csv(df: pl.DataFrame, path: Path) -> Path:
    lists = [c for c, t in df.schema.items() if isinstance(t, (pl.List, pl.Array))]
    df.with_columns(pl.col(c).list.eval(pl.element().cast(pl.String)).list.join(" ") for c in lists).write_csv(path)
    return path


def _finish(summary: dict, out: Path) -> dict:
    summary["files"] = sorted({str(p) for p in summary["files"]} | {str(out / "summary.json")})
    (out / "summary.json").write_text(json.dumps(summary, default=str) + "\n")  # unindented: json uses its C encoder
    return summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        summary = run_report(args)
    except (BaselineError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c = summary["counts"]
    print(f"runs found {c['found']}: " + ", ".join(f"{k} {v}" for k, v in c.items() if k != "found"))
    for p in summary["problems"]:
        print(f"  {p['kind']}: {p['path']} — {p['reason']}")
    for name, t in summary["tables"].items():
        print(
            f"{name}: "
            + (
                f"skipped: {t['skipped']}"
                if "skipped" in t
                else f"{t['rows']} rows; baselines " + "; ".join(f"{b}: {x['group']}" for b, x in t["baseline"].items())
            )
        )
    if "skipped" in summary.get("curves", {}):
        print(f"curves: skipped: {summary['curves']['skipped']}")
    main_set = summary.get("main_setting")
    if main_set:
        shown = [k for k in ("alpha", "target", "memory_dim", "layer_set") if main_set[k] is not None]
        print(
            "main setting: "
            + ", ".join(
                f"{k}={main_set[k]:g}" if isinstance(main_set[k], float) else f"{k}={main_set[k]}" for k in shown
            )
            + " ("
            + ", ".join(f"{k} from {main_set['source'][k]}" for k in shown)
            + ")"
        )
    for note in summary["notes"]:
        print(f"note: {note}")
    print(f"wrote {len(summary['files'])} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
