"""Analysis of HeRo Lab run records (``results.json``): seed statistics, Retain, quality–cost curves, tables.

Typical use::

    from analysis import load_runs, paper_tables, build_table
    runs = load_runs(["multirun/"])
    frame = runs.records.collect()
    for spec in paper_tables(main_alpha=1e-3):
        table = build_table(frame, spec, runs.tasks)
        print(table.to_markdown() if table else f"{spec.stem}: no runs")

The command line is ``python -m analysis.report <dirs…> --out <dir>``; plots are in
``analysis.plots`` (imports matplotlib), the benchmark in ``python -m analysis.report_timing``.
"""

from analysis.curves import (
    Curve,
    area_between,
    curve_points,
    curves,
    matched_skip,
    monotone_fit,
    reference_curves,
    skip_adjusted,
)
from analysis.latency import latency_table
from analysis.load import KEYS, Runs, find_runs, load_runs
from analysis.reference import Baseline, BaselineError, parse_selector, resolve_baselines, selector_expr, with_retain
from analysis.resolution import comparisons, resolution_markdown, seeds_needed
from analysis.stats import paired_differences, summarize, t_quantile
from analysis.tables import Table, TableSpec, build_table, paper_tables

__all__ = [
    "KEYS",
    "Baseline",
    "BaselineError",
    "Curve",
    "Runs",
    "Table",
    "TableSpec",
    "area_between",
    "build_table",
    "comparisons",
    "curve_points",
    "curves",
    "find_runs",
    "latency_table",
    "load_runs",
    "matched_skip",
    "monotone_fit",
    "paired_differences",
    "paper_tables",
    "parse_selector",
    "reference_curves",
    "resolution_markdown",
    "resolve_baselines",
    "seeds_needed",
    "skip_adjusted",
    "selector_expr",
    "summarize",
    "t_quantile",
    "with_retain",
]
