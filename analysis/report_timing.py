"""Benchmark: how long the report takes on many records (``python -m analysis.report_timing``).

Writes ``--records`` synthetic records (``analysis.synthetic``, the generator the analysis
tests use) spread over
backbones and seeds, plus one failed and one incomplete run, then times in this
process: loading every record, and the whole report without plots (Tables 1–4 in
Markdown/CSV/LaTeX, group statistics, curves, matched-skip comparisons, areas,
summary). The target is all tables from 10,000 records in ≤ 3 s. Plots are timed
separately with ``--plots``. Record generation is not timed.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from analysis import synthetic as gen
from analysis.load import load_runs
from analysis.report import build_parser, run_report

RUNS_PER_SEED = 21


def write_records(root: Path, n: int, backbones: int) -> int:
    """Write exactly ``n`` completed records (plus one failed and one incomplete run) under ``root``."""
    seeds = range(42, 42 + math.ceil(n / (RUNS_PER_SEED * backbones)))
    specs = gen.default_grid(seeds, tuple(f"bench{i}" for i in range(backbones)))[:n]
    for spec in specs:
        gen.write_run(root, spec)
    gen.write_run(root, gen.failed_run())
    gen.write_incomplete(root)
    return len(specs)


@dataclass
class Timing:
    value: object
    wall: float
    cpu: float
    loadavg: float

    def __str__(self) -> str:
        return f"{self.wall:.2f} s wall ({self.cpu:.2f} s CPU, all threads)"


def _timed(fn) -> Timing:
    """Wall and process CPU time of ``fn()``; the 1-minute load average just before (other work slows wall time)."""
    loadavg = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return Timing(value, time.perf_counter() - wall, time.process_time() - cpu, loadavg)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m analysis.report_timing", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=10_000, help="completed records to generate (default: 10000)")
    p.add_argument("--backbones", type=int, default=8, help="backbones to spread them over (default: 8)")
    p.add_argument("--dir", type=Path, help="reuse/keep the records here instead of a temporary directory")
    p.add_argument("--plots", action="store_true", help="also time the plots")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hero_bench_") as tmp:
        root = args.dir or Path(tmp) / "records"
        if not (root.exists() and any(root.iterdir())):
            t = time.perf_counter()
            n = write_records(root, args.records, args.backbones)
            print(f"generated {n} records under {root} in {time.perf_counter() - t:.1f} s (not timed)")
        load = _timed(lambda: load_runs([root]))
        report_args = build_parser().parse_args([str(root), "--out", str(Path(tmp) / "report"), "--no-plots"])
        report = _timed(lambda: run_report(report_args))
        counts = load.value.counts()
        print(f"records: {counts}; load average before timing: {load.loadavg:.1f} on {os.cpu_count()} CPUs")
        print(f"load only: {load}")
        print(
            f"all tables (load + Tables 1-4 + groups + curves + matched skip + summary, no plots): {report} "
            f"for {counts['completed']} records -> {'PASS' if report.wall <= 3.0 else 'FAIL'} (target <= 3 s wall); "
            f"{len(report.value['files'])} files"
        )
        if args.plots:
            report_args = build_parser().parse_args([str(root), "--out", str(Path(tmp) / "report_plots")])
            print(f"with plots: {_timed(lambda: run_report(report_args))}")


if __name__ == "__main__":
    main()
