"""Two suites side by side: do they order the methods alike, and which one separates them for less CPU?

    python -m analysis.two_suites RECORDS_A RECORDS_B [--reference method=hero] [--out FILE]

``RECORDS_A`` and ``RECORDS_B`` hold the same trained runs scored on two suites (e.g. our own ``eval=smollm2``
and the paper's ``eval=paper7_cpu``, the second from ``python -m hero.rescore RUN_DIR eval=paper7_cpu``); each
is one records directory or several joined by commas (two studies that share runs: a record found twice, same
``config_hash``, is read once). Each record carries its Retain against the dense baseline of its own suite. Runs
are matched by their group (``analysis.load.KEYS``) and seed. The Markdown written has:

* per group: seeds, Retain mean ± std on each suite, the chance-normalised Retain where a record carries it
  (``retain_chance``), and the evaluation seconds per run (``eval_meta.wall_time_s``);
* the rank agreement of the group means (Spearman's ρ over the groups scored on both suites, the baseline
  method left out: its Retain is 100 on both by construction), and the pairs the two suites order differently;
* against one reference group (``--reference``, a selector as in ``analysis.reference``), for every group with at
  least two seeds in common with it on both suites: the paired difference (same seed) mean ± std, the seeds a
  95 % t interval needs to exclude 0 at that difference and std (``analysis.resolution.seeds_needed``), and the
  CPU minutes those seeds cost: 2 runs per seed × (training minutes + that suite's evaluation minutes), the
  training minutes being a run's ``wall_time_s`` less its evaluation in ``RECORDS_A`` (where the runs trained).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import polars as pl

from analysis.load import KEYS, load_runs
from analysis.reference import parse_selector
from analysis.resolution import seeds_needed

BASELINE_METHOD = "dense"


def suite_frame(path: str) -> tuple[str, pl.DataFrame]:
    """(suite name, one row per scored run: KEYS, seed, label, retain, retain_chance, eval_s, wall_s);
    ``path``: a records directory or several joined by commas."""
    runs = load_runs(path.split(",")).records.filter(pl.col("scored")).collect()
    suites = sorted(set(runs["eval_meta.suite"].drop_nulls().to_list())) if "eval_meta.suite" in runs.columns else []
    if len(suites) != 1:
        raise ValueError(f"{path}: the records must be scored on one suite; found {suites or 'none'}")
    for col in ("retain_chance.value", "eval_meta.wall_time_s"):
        if col not in runs.columns:
            runs = runs.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    frame = runs.select(
        *KEYS,
        "seed",
        pl.col("retain.value").alias("retain"),
        pl.col("retain_chance.value").alias("retain_chance"),
        pl.col("eval_meta.wall_time_s").alias("eval_s"),
        pl.col("wall_time_s").alias("wall_s"),
    )
    return suites[0], frame.with_columns(label=pl.struct(*KEYS).map_elements(label, return_dtype=pl.String))


def label(group: dict) -> str:
    """``hero/full α=0.001`` / ``skipgpt_rt knob=0.488`` / ``lora``: what differs between this study's groups."""
    name = group["method"] if group["variant"] in (None, group["method"]) else f"{group['method']}/{group['variant']}"
    if group.get("alpha") not in (None, 0.0) and group["method"] == "hero":
        name += f" α={group['alpha']:g}"
    if group.get("knob") is not None:
        name += f" knob={group['knob']:g}"
    return name


def _mean_std(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return f"{mean:.2f} ± {std:.2f}"


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's ρ (average ranks for ties); None below three pairs or with a constant side."""
    if len(x) < 3:
        return None
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sx, sy = math.sqrt(sum((a - mx) ** 2 for a in rx)), math.sqrt(sum((b - my) ** 2 for b in ry))
    return None if sx == 0 or sy == 0 else sxy / (sx * sy)


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def compare(path_a: str, path_b: str, reference: str) -> str:
    """The Markdown described in the module docstring."""
    (suite_a, a), (suite_b, b) = suite_frame(path_a), suite_frame(path_b)
    selector = parse_selector(reference)
    groups = sorted(set(a["label"].to_list()) | set(b["label"].to_list()))
    lines = [
        f"# The same runs on two suites: `{suite_a}` and `{suite_b}`",
        "",
        "Retain against dense on each suite (mean ± std over seeds); chance-normalised Retain is "
        "(score − chance) / (dense − chance), averaged over the Retain tasks; evaluation seconds per run at the "
        "threads each run used.",
        "",
        f"| group | seeds ({suite_a}) | Retain ({suite_a}) | seeds ({suite_b}) | Retain ({suite_b}) "
        f"| chance-normalised ({suite_b}) | eval s/run ({suite_a}) | eval s/run ({suite_b}) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    means = {}
    for g in groups:
        ra, rb = a.filter(pl.col("label") == g), b.filter(pl.col("label") == g)
        means[g] = (_mean(ra["retain"].to_list()), _mean(rb["retain"].to_list()))
        ea, eb = _mean(ra["eval_s"].to_list()), _mean(rb["eval_s"].to_list())
        lines.append(
            f"| {g} | {_seeds(ra)} | {_retain(g, ra, 'retain')} | {_seeds(rb)} | {_retain(g, rb, 'retain')} "
            f"| {_retain(g, rb, 'retain_chance')} "
            f"| {'–' if ea is None else f'{ea:.0f}'} | {'–' if eb is None else f'{eb:.0f}'} |"
        )
    both = [g for g in groups if None not in means[g] and g != BASELINE_METHOD]
    rho = spearman([means[g][0] for g in both], [means[g][1] for g in both])
    flipped = [
        f"{g} / {h}"
        for i, g in enumerate(both)
        for h in both[i + 1 :]
        if (means[g][0] - means[h][0]) * (means[g][1] - means[h][1]) < 0
    ]
    lines += [
        "",
        f"**Orderings.** Spearman's ρ of the group means over the {len(both)} groups scored on both suites "
        f"(dense left out): {'–' if rho is None else f'{rho:.2f}'}. Pairs ordered differently: "
        f"{', '.join(flipped) if flipped else 'none'}.",
        "",
    ]
    lines += _resolution(a, b, suite_a, suite_b, selector)
    return "\n".join(lines) + "\n"


def _retain(group: str, frame: pl.DataFrame, column: str) -> str:
    """Mean ± std of a Retain column; the baseline's own runs read "100 (baseline)" (their records carry none)."""
    if group == BASELINE_METHOD and frame.height:
        return "100 (baseline)"
    return _mean_std(frame[column].to_list())


def _seeds(frame: pl.DataFrame) -> str:
    return ",".join(str(s) for s in sorted(frame["seed"].to_list())) or "–"


def _resolution(a: pl.DataFrame, b: pl.DataFrame, suite_a: str, suite_b: str, selector: dict) -> list[str]:
    ref = a.filter(pl.all_horizontal(pl.col(k).cast(pl.String) == v for k, v in selector.items()))
    ref_labels = sorted(set(ref["label"].to_list()))
    if len(ref_labels) != 1:
        raise ValueError(f"--reference {selector}: picks {ref_labels or 'no group'} in {suite_a}; it must pick one")
    ref_label = ref_labels[0]
    lines = [
        f"**Resolution against `{ref_label}`** (paired by seed; seeds for a 95 % t interval to exclude 0 at the "
        "measured difference and std; CPU minutes for those seeds = 2 runs per seed × (training + the suite's "
        f"evaluation), training being a run's wall time less its evaluation on `{suite_a}`, averaged over the two groups):",
        "",
        "| group | suite | shared seeds | difference | std | seeds needed | CPU min |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in sorted(set(a["label"].to_list()) - {ref_label}):
        pair = a.filter(pl.col("label").is_in([g, ref_label]))
        train_min = _mean((pair["wall_s"] - pair["eval_s"]).to_list()) / 60
        for suite, frame in ((suite_a, a), (suite_b, b)):
            run = frame.filter(pl.col("label") == g).select("seed", "retain")
            base = frame.filter(pl.col("label") == ref_label).select("seed", pl.col("retain").alias("ref"))
            diff = run.join(base, on="seed").with_columns(d=pl.col("retain") - pl.col("ref"))
            if diff.height < 2:
                continue
            d = diff["d"].to_list()
            mean = sum(d) / len(d)
            std = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
            n = seeds_needed(std, abs(mean))
            eval_min = _mean(frame.filter(pl.col("label").is_in([g, ref_label]))["eval_s"].to_list()) / 60
            cost = "–" if n is None else f"{2 * n * (train_min + eval_min):.0f}"
            lines.append(
                f"| {g} | {suite} | {diff.height} | {mean:+.2f} | {std:.2f} | {'> 1000' if n is None else n} | {cost} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.two_suites", description=__doc__.split("\n\n")[0])
    p.add_argument("records_a", help="records scored on the first suite (where the runs trained); DIR[,DIR...]")
    p.add_argument("records_b", help="the same runs rescored on the second suite; DIR[,DIR...]")
    p.add_argument("--reference", default="method=hero", help="selector of the group the others are compared to")
    p.add_argument("--out", help="write the Markdown here (default: stdout)")
    args = p.parse_args(argv)
    for path in [*args.records_a.split(","), *args.records_b.split(",")]:
        if not Path(path).exists():
            print(f"no such records directory: {path}", file=sys.stderr)
            return 2
    try:
        text = compare(args.records_a, args.records_b, args.reference)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
