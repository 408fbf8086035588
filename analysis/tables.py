"""The paper's Tables 1–4 (HERO_SPEC §8) as polars frames, Markdown, CSV and LaTeX.

Each table is a set of rows (groups of seeds, see ``analysis.load.KEYS``) chosen by
the "main setting" (α, memory dim, layer set), and a named Retain baseline chosen
among those rows by a selector (``analysis.reference``):

=====  ============  ==========================================================  ======================
table  name          rows                                                        default baseline
=====  ============  ==========================================================  ======================
1      main          every non-HeRo method, a row per knob; full HeRo at main α  ``method=dense``
2      alpha_sweep   full HeRo, main dim and layer set, one row per α            ``alpha=<main α>``
3      ablations     HeRo at the main α, dim and layer set, one row per variant  ``variant=full``
4      memory_dim    full HeRo, main α and layer set, one row per memory dim     ``memory_dim=<main dim>``
=====  ============  ==========================================================  ======================

Cells are mean ± std over seeds; task scores and the realized parameter skip rate
(``skip.param_rate``, HERO_SPEC §7) are shown ×100, Retain is already ×100. Every
rendering states the baseline and the task set; the CSV also carries the t
confidence interval and the seeds, and the paired differences against the baseline
over shared seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from analysis.load import KEYS
from analysis.reference import Baseline, resolve_baselines, with_retain
from analysis.stats import paired_differences, summarize

HEADERS = {
    "backbone": "Backbone",
    "method": "Method",
    "variant": "Variant",
    "layer_set": "Layers",
    "alpha": "α",
    "knob": "Knob",
    "memory_dim": "Memory dim",
    "avg": "Avg",
    "skip": "Skip %",
    "retain": "Retain %",
    "n": "n",
}
PAIRED_METRICS = ("retain", "avg", "skip")


@dataclass(frozen=True)
class TableSpec:
    """Which rows a table has, how rows are labelled, and its baseline selector (and the CLI option that sets it)."""

    number: int
    name: str
    title: str
    rows: str
    row_filter: pl.Expr
    labels: tuple[str, ...]
    baseline: str
    option: str

    @property
    def stem(self) -> str:
        return f"table{self.number}_{self.name}"


@dataclass
class Table:
    """A built table: its groups' statistics, per-run values, baselines (per backbone) and task set."""

    spec: TableSpec
    baselines: dict[str, Baseline]
    metrics: dict[str, str]
    runs: pl.DataFrame
    stats: pl.DataFrame
    paired: pl.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> list[str]:
        return list(dict.fromkeys(t for b in self.baselines.values() for t in b.tasks))

    def caption(self) -> list[str]:
        """The lines naming the rows, the baseline and task set of every backbone."""
        lines = [
            f"Table {self.spec.number} — {self.spec.title}. Rows: {self.spec.rows}.",
            *(b.describe(self.metrics) for b in self.baselines.values()),
            "Cells: mean ± std over seeds; task scores and skip ×100; skip is the realized parameter skip rate.",
        ]
        return lines + self.notes

    def display(self) -> pl.DataFrame:
        """The table as strings, in the paper's layout: labels, tasks, Avg, Skip %, Retain %, n."""
        metrics = [f"score.{t}" for t in self.tasks] + ["avg", "skip", "retain"]
        cols = [
            pl.col(c).map_elements(_fmt_label, return_dtype=pl.String).alias(HEADERS.get(c, c))
            for c in ("backbone", *self.spec.labels)
        ]
        for m in metrics:
            cols.append(_cell(m).alias(HEADERS.get(m, m.removeprefix("score."))))
        return self.stats.select(*cols, pl.col("n").cast(pl.String))

    def csv_frame(self) -> pl.DataFrame:
        """The statistics with the seeds as text and the baseline and task set of each row's backbone."""
        return self._named(self.stats)

    def is_baseline(self) -> pl.Expr:
        """True on the rows of this table's baseline groups (one per backbone)."""
        return _in_baselines(self.baselines)

    def paired_frame(self) -> pl.DataFrame:
        """The paired differences (run − baseline over shared seeds), named like ``csv_frame``."""
        return self._named(self.paired)

    def _named(self, df: pl.DataFrame) -> pl.DataFrame:
        base = {b: f"{x.label} ({x.selector})" for b, x in self.baselines.items()}
        tasks = {b: " ".join(f"{t}:{self.metrics[t]}" for t in x.tasks) for b, x in self.baselines.items()}
        return df.with_columns(
            pl.col("seeds").list.eval(pl.element().cast(pl.String)).list.join(" "),
            pl.col("backbone").replace_strict(base, default=None).alias("retain_baseline"),
            pl.col("backbone").replace_strict(tasks, default=None).alias("task_set"),
        )

    def to_markdown(self) -> str:
        df = self.display()
        lines = [f"**{self.caption()[0]}**", ""] + [f"- {line}" for line in self.caption()[1:]] + [""]
        lines += _pipe_table(df.columns, df.rows())
        lines += [
            "",
            "Paired differences vs the baseline over shared seeds (run − baseline; mean ± std, "
            "n shared seeds): Δ Retain, Δ Avg, Δ Skip.",
            "",
        ]
        paired = self.paired.select(
            *(
                pl.col(c).map_elements(_fmt_label, return_dtype=pl.String).alias(HEADERS.get(c, c))
                for c in ("backbone", *self.spec.labels)
            ),
            *(_cell(m).alias(f"Δ {HEADERS[m]}") for m in PAIRED_METRICS),
            pl.col("n").cast(pl.String),
        )
        lines += _pipe_table(paired.columns, paired.rows())
        return "\n".join(lines) + "\n"

    def to_latex(self) -> str:
        df = self.display()
        caption = " ".join(_tex(line.rstrip(".") + ".") for line in self.caption())
        body = [" & ".join(_tex(v) for v in row) + r" \\" for row in df.rows()]
        n_labels = len(self.spec.labels) + 1
        return (
            "\n".join(
                [
                    r"\begin{table}[t]",
                    r"\centering",
                    r"\small",
                    rf"\caption{{{caption}}}",
                    rf"\label{{tab:{self.spec.stem}}}",
                    rf"\begin{{tabular}}{{{'l' * n_labels}{'r' * (df.width - n_labels)}}}",
                    r"\toprule",
                    " & ".join(_tex(c) for c in df.columns) + r" \\",
                    r"\midrule",
                    *body,
                    r"\bottomrule",
                    r"\end{tabular}",
                    r"\end{table}",
                ]
            )
            + "\n"
        )

    def write(self, out: Path) -> list[Path]:
        """Write ``<stem>.md``, ``<stem>.csv``, ``<stem>.tex`` and ``<stem>_paired.csv`` under ``out``."""
        stem = self.spec.stem
        paths = [out / f"{stem}.{ext}" for ext in ("md", "csv", "tex")] + [out / f"{stem}_paired.csv"]
        paths[0].write_text(self.to_markdown())
        self.csv_frame().write_csv(paths[1])
        paths[2].write_text(self.to_latex())
        self.paired_frame().write_csv(paths[3])
        return paths


def close_to(col: str, value: float) -> pl.Expr:
    return ((pl.col(col).cast(pl.Float64) - value).abs() <= 1e-9 * abs(value)).fill_null(False)


def paper_tables(
    main_alpha: float = 1e-3,
    main_memory_dim: int = 64,
    main_layer_set: str = "second_half",
    baselines: dict[int, str] | None = None,
    main_target: float | None = None,
) -> list[TableSpec]:
    """The four table specs for a main setting; ``baselines`` overrides the default selector of a table number.

    With ``main_target`` (a calibration target), Tables 1, 3 and 4 take the HeRo runs calibrated to that
    realized skip instead of those at ``main_alpha``: every variant then has its own α at one skip rate."""
    sel = {1: "method=dense", 2: f"alpha={main_alpha!r}", 3: "variant=full", 4: f"memory_dim={main_memory_dim}"}
    sel.update(baselines or {})
    hero, full = pl.col("method") == "hero", pl.col("variant") == "full"
    at_dim, at_layers = pl.col("memory_dim") == main_memory_dim, pl.col("layer_set") == main_layer_set
    if main_target is None:
        at_main, point = close_to("alpha", main_alpha), f"α={main_alpha:g}"
    else:
        at_main, point = close_to("calibration.target", main_target), f"α calibrated to {100 * main_target:g} % skip"
    main = f"{point}, memory_dim={main_memory_dim}, layer_set={main_layer_set}"
    return [
        TableSpec(
            1,
            "main",
            "Main results",
            f"every non-HeRo method; full HeRo at {point}, memory_dim={main_memory_dim}, every layer set",
            (~hero) | (full & at_main & at_dim),
            ("method", "variant", "layer_set", "alpha", "knob"),
            sel[1],
            "--baseline-table1",
        ),
        TableSpec(
            2,
            "alpha_sweep",
            "α sweep",
            f"full HeRo, memory_dim={main_memory_dim}, layer_set={main_layer_set}, one row per α",
            hero & full & at_dim & at_layers,
            ("alpha",),
            sel[2],
            "--baseline-table2",
        ),
        TableSpec(
            3,
            "ablations",
            "Ablations",
            f"HeRo variants at {main}",
            hero & at_main & at_dim & at_layers,
            ("variant",),
            sel[3],
            "--baseline-table3",
        ),
        TableSpec(
            4,
            "memory_dim",
            "Memory dimension",
            f"full HeRo, {point}, layer_set={main_layer_set}, one row per memory dim",
            hero & full & at_main & at_layers,
            ("memory_dim",),
            sel[4],
            "--baseline-table4",
        ),
    ]


def build_table(
    runs: pl.DataFrame, spec: TableSpec, metrics: dict[str, str], tasks: list[str] | None = None, level: float = 0.95
) -> Table | None:
    """Build ``spec`` from per-run rows (``Runs.records`` collected); ``None`` if no scored run matches its rows.

    Raises ``BaselineError`` when the baseline selector does not pick one group per backbone.
    """
    rows = runs.filter(spec.row_filter & pl.col("scored"))
    if rows.height == 0:
        return None
    baselines = resolve_baselines(rows, spec.baseline, spec.option, metrics, tasks)
    rows = with_retain(rows, baselines)
    rows = pl.concat(
        [_with_avg(rows.filter(pl.col("backbone") == b), base) for b, base in baselines.items()], how="vertical_relaxed"
    )
    task_cols = list(dict.fromkeys(f"score.{t}" for b in baselines.values() for t in b.tasks))
    rows = rows.with_columns(*(pl.col(c) * 100.0 for c in task_cols), (pl.col("skip.param_rate") * 100.0).alias("skip"))
    values = [*task_cols, "avg", "skip", "retain"]
    is_base = _in_baselines(baselines)
    stats = summarize(rows, values, level=level)
    order = stats.with_columns(is_base.not_().alias("_other")).sort(["backbone", "_other", *KEYS], nulls_last=True)
    reference = rows.filter(is_base)
    paired = paired_differences(rows, reference, list(PAIRED_METRICS), level=level)
    paired = order.select(KEYS).join(paired, on=list(KEYS), how="left", nulls_equal=True, maintain_order="left")
    lacking = rows.filter(pl.col("retain").is_null())
    notes = [f"No Retain for {r['path']}: a task of the set is missing." for r in lacking.select("path").to_dicts()]
    return Table(spec, baselines, metrics, rows, order.drop("_other"), paired, notes)


def _with_avg(rows: pl.DataFrame, base: Baseline) -> pl.DataFrame:
    """``avg``: the run's mean score over its backbone's task set (×100), null if a task is missing."""
    cols = [pl.col(f"score.{t}") for t in base.tasks]
    avg = pl.sum_horizontal(cols) * (100.0 / len(cols))
    missing = pl.any_horizontal(c.is_null() for c in cols)
    return rows.with_columns(pl.when(missing).then(None).otherwise(avg).alias("avg"))


def _in_baselines(baselines: dict[str, Baseline]) -> pl.Expr:
    """True on the rows of any of the baseline groups (one per backbone)."""
    return pl.any_horizontal(*(_in_group(b.group) for b in baselines.values()))


def _in_group(group: dict) -> pl.Expr:
    expr = pl.lit(True)
    for k in KEYS:
        expr = expr & (pl.col(k).is_null() if group[k] is None else pl.col(k) == group[k])
    return expr


def _cell(metric: str) -> pl.Expr:
    mean, std = pl.col(f"{metric}.mean"), pl.col(f"{metric}.std")
    return (
        pl.when(mean.is_null())
        .then(pl.lit("–"))
        .when(std.is_null())
        .then(_two(mean))
        .otherwise(pl.format("{} ± {}", _two(mean), _two(std)))
    )


def _two(expr: pl.Expr) -> pl.Expr:
    return expr.map_elements(lambda v: f"{v:.2f}", return_dtype=pl.String)


def _fmt_label(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _pipe_table(header: list[str], rows: list[tuple]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]


def _tex(text) -> str:
    text = str(text)
    for a, b in (
        ("\\", r"\textbackslash{}"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("±", r"$\pm$"),
        ("×", r"$\times$"),
        ("α", r"$\alpha$"),
        ("Δ", r"$\Delta$"),
        ("—", "---"),
        ("–", "--"),
    ):
        text = text.replace(a, b)
    return text
