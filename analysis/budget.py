"""What a set of runs cost: wall time summed over runs, per group and in all, from the records.

Every record carries ``wall_time_s`` (the run's own wall time, start to record) and its config's
``trainer.num_threads`` (the torch threads it used; null: all cores). ``job_s`` is wall time summed
over runs, what a study costs on one machine running one job at a time; ``cpu_s`` multiplies
each run's wall time by its threads, and is null for a group with a run whose threads are
unknown. Only completed records count: a failed run's time, a killed run's, and the wall time
of jobs overlapping on one machine are not in the records. A run that loaded a finished run's
trained state instead of training (``trained_by``, ``hero.pipeline``) counts only its own time,
loading and scoring; where records have such runs, ``reused`` counts them per group and the
markdown says so.
"""

from __future__ import annotations

import polars as pl

from analysis.load import KEYS

THREADS = "config.trainer.num_threads"


def budget_table(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per group (``KEYS``): n runs, job_s (summed wall time), mean_s, threads, cpu_s; then a total row."""
    threads = pl.col(THREADS) if THREADS in frame.columns else pl.lit(None, dtype=pl.Int64)
    reused = ["trained_by"] if "trained_by" in frame.columns else []
    runs = frame.select(*KEYS, pl.col("wall_time_s").cast(pl.Float64), threads.cast(pl.Int64).alias("threads"), *reused)
    cpu = (pl.col("wall_time_s") * pl.col("threads")).sum()
    unknown = pl.col("threads").is_null().any()
    aggs = [
        pl.len().alias("n"),
        pl.col("wall_time_s").sum().alias("job_s"),
        pl.col("wall_time_s").mean().alias("mean_s"),
        pl.col("threads").unique().sort().cast(pl.String).str.join(" ").alias("threads"),
        pl.when(unknown).then(None).otherwise(cpu).alias("cpu_s"),
        *([pl.col("trained_by").is_not_null().sum().alias("reused")] if reused else []),
    ]
    groups = runs.group_by(list(KEYS)).agg(aggs).sort(list(KEYS), nulls_last=True)
    total = runs.select(aggs).with_columns(pl.lit("total").alias("method"))
    return pl.concat([groups, total], how="diagonal_relaxed")


def budget_markdown(table: pl.DataFrame) -> str:
    """The total and one line per group, in minutes."""
    total = table.filter(pl.col("method") == "total").to_dicts()[0]
    cpu = "unknown (a run's threads are not recorded)" if total["cpu_s"] is None else f"{total['cpu_s'] / 60:.1f} min"
    lines = [
        f"**Cost of these runs** (completed records only): {total['n']} runs, wall time summed over runs "
        f"{total['job_s'] / 60:.1f} min ({total['job_s'] / 3600:.2f} h), CPU time {cpu}.",
        *(
            [
                f"{total['reused']} of them loaded a finished run's trained state instead of training "
                "(`trained_by`): their time is loading and scoring only.",
            ]
            if total.get("reused")
            else []
        ),
        "",
        "| group | n | summed wall min | mean min per run | threads | CPU min |",
        "|---|---|---|---|---|---|",
    ]
    for r in table.filter(pl.col("method") != "total").to_dicts():
        knob = "" if r["knob"] is None else f" knob {r['knob']:g}"
        alpha = f" α {r['alpha']:g}" if r["method"] == "hero" and r["alpha"] else ""
        cpu_min = "–" if r["cpu_s"] is None else f"{r['cpu_s'] / 60:.1f}"
        lines.append(
            f"| {r['backbone']} {r['method']}/{r['variant']}{alpha}{knob} | {r['n']} | {r['job_s'] / 60:.1f} | "
            f"{r['mean_s'] / 60:.1f} | {r['threads'] or 'all'} | {cpu_min} |"
        )
    return "\n".join(lines) + "\n"
