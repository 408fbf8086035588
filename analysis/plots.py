"""PNG figures: quality–cost curves, quality vs latency, per-layer FFN usage, per-token skip, learned ρ,
Retain against training budget, training curves.

Each function takes polars frames from the other ``analysis`` modules, writes one
PNG (matplotlib, Agg backend) and returns its path, or ``None`` when the records
carry none of the data it needs (the report lists what was skipped). Skip rates
are the realized parameter skip rate in % (HERO_SPEC §7).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from analysis.curves import CURVE_KEYS, curves  # noqa: E402
from analysis.latency import PLOTTED_FIGURES  # noqa: E402
from analysis.load import KEYS, layer_values  # noqa: E402
from analysis.tables import close_to  # noqa: E402

DPI = 120
EDGES, COUNTS = "skip.per_token.histogram.edges", "skip.per_token.histogram.counts"


def quality_cost(
    points: pl.DataFrame, metrics: dict[str, str], path: Path, runs: pl.DataFrame | None = None
) -> Path | None:
    """One panel per (backbone, metric): seed-mean quality vs skip with seed-std error bars and the monotone fit.

    ``metrics`` maps a column of ``curve_points`` to its axis label; with ``runs`` the fit is over the runs
    (as ``analysis.curves`` compares at matched skip).
    """
    if points.height == 0:
        return None
    backbones = sorted(points["backbone"].unique().to_list())
    fig, axes = plt.subplots(
        len(backbones), len(metrics), figsize=(4.2 * len(metrics), 3.6 * len(backbones)), squeeze=False
    )
    for i, backbone in enumerate(backbones):
        mine = points.filter(pl.col("backbone") == backbone)
        for j, (metric, label) in enumerate(metrics.items()):
            ax = axes[i][j]
            for c in curves(mine, metric, None if runs is None else runs.filter(pl.col("backbone") == backbone)):
                part = mine.filter(*(pl.col(k) == c.key[k] for k in CURVE_KEYS if c.key[k] is not None))
                bars = ax.errorbar(
                    part["skip.mean"],
                    part[f"{metric}.mean"],
                    xerr=part["skip.std"].fill_null(0),
                    yerr=part[f"{metric}.std"].fill_null(0),
                    fmt="o",
                    ms=4,
                    capsize=2,
                    label=c.label,
                )
                if c.interpolable:
                    ax.plot(*c.fit, "--", lw=1, color=bars[0].get_color())
            ax.set(xlabel="realized parameter skip (%)", ylabel=label, title=f"{backbone}: {label}")
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return _save(fig, path)


def quality_latency(latency: pl.DataFrame, metric: str, label: str, path: Path) -> Path | None:
    """Per plotted benchmark figure and shape: quality vs the figure (records linked to a quality, top) and the
    figure vs realized skip (every benchmark record, bottom); ``None`` without benchmark records."""
    figures = [c for c in latency.columns if c.startswith("bench.") and c.split(".")[1] in PLOTTED_FIGURES]
    if latency.height == 0 or not figures:
        return None
    fig, axes = plt.subplots(2, len(figures), figsize=(4.5 * len(figures), 7.0), squeeze=False)
    for top, bottom, name in zip(axes[0], axes[1], figures):
        part = latency.filter(pl.col(name).is_not_null())
        for row in part.iter_rows(named=True):
            tag = f"{row['method']}/{row['variant']} s{row['seed']}, skip {row['skip']:.1f} %"
            if row[metric] is not None:
                top.plot(row[name], row[metric], "o", label=tag)
            bottom.plot(row["skip"], row[name], "o", label=tag)
        top.set(xlabel=name.removeprefix("bench."), ylabel=label)
        bottom.set(xlabel="realized parameter skip (%)", ylabel=name.removeprefix("bench."))
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    axes[1][-1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return _save(fig, path)


def ffn_usage_heatmap(runs: pl.DataFrame, path: Path) -> Path | None:
    """Rows: groups; columns: routable layers; colour: fraction of tokens executing the FFN (seed mean)."""
    long = _layer_long(runs, "per_layer_ffn_rate")
    if long.height == 0:
        return None
    wide = long.pivot(on="layer", index="group", values="value", sort_columns=True, maintain_order=True)
    layers = wide.columns[1:]
    fig, ax = plt.subplots(figsize=(1.0 + 0.45 * len(layers) + 3.0, max(2.5, 0.9 + 0.32 * wide.height)))
    im = ax.imshow(wide.select(layers).to_numpy(), aspect="auto", vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_xticks(range(len(layers)), layers)
    ax.set_yticks(range(wide.height), wide["group"].to_list(), fontsize=7)
    ax.set_xlabel("backbone layer (0-based)")
    ax.set_title("FFN usage per layer\n(fraction of tokens executing the FFN)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04)
    return _save(fig, path)


def rho_per_layer(
    runs: pl.DataFrame, path: Path, main_alpha: float, main_memory_dim: int, main_layer_set: str
) -> Path | None:
    """Learned forget factor ρ per layer, seed mean ± std; per backbone the two views of ``_two_views``."""
    if layer_values(runs, "rho").height == 0:
        return None
    return _two_views(runs, "learned ρ", path, _rho_lines, main_alpha, main_memory_dim, main_layer_set)


def per_token_skip(
    runs: pl.DataFrame, path: Path, main_alpha: float, main_memory_dim: int, main_layer_set: str
) -> Path | None:
    """Distribution over tokens of the per-token skip rate (histograms normalised, then averaged over seeds)."""
    if COUNTS not in runs.columns or EDGES not in runs.columns:
        return None
    have = runs.filter(pl.col(COUNTS).list.len().fill_null(0) > 0)
    if have.height == 0:
        return None
    return _two_views(have, "share of tokens", path, _token_lines, main_alpha, main_memory_dim, main_layer_set)


def _two_views(
    runs: pl.DataFrame, ylabel: str, path: Path, draw, main_alpha: float, main_memory_dim: int, main_layer_set: str
) -> Path:
    """One row per backbone: left, the HeRo groups at the main α and layer set (a line per variant / memory dim);
    right, full HeRo at the main memory dim and layer set (a line per α)."""
    hero = runs.filter((pl.col("method") == "hero") & (pl.col("layer_set") == main_layer_set))
    backbones = sorted(hero["backbone"].unique().to_list()) or ["(none)"]
    fig, axes = plt.subplots(len(backbones), 2, figsize=(10, 3.4 * len(backbones)), squeeze=False)
    dim_suffix = (
        pl.when(pl.col("memory_dim") == main_memory_dim)
        .then(pl.lit(""))
        .otherwise(pl.format(" d_m={}", pl.col("memory_dim")))
    )
    for row, backbone in zip(axes, backbones):
        mine = hero.filter(pl.col("backbone") == backbone)
        left = (
            mine.filter(close_to("alpha", main_alpha))
            .with_columns(label=pl.concat_str(pl.col("variant"), dim_suffix))
            .sort("variant", "memory_dim")
        )
        right = mine.filter((pl.col("variant") == "full") & (pl.col("memory_dim") == main_memory_dim)).sort("alpha")
        right = right.with_columns(label=pl.col("alpha").map_elements(lambda a: f"α={a:g}", return_dtype=pl.String))
        titles = (f"{backbone}: α={main_alpha:g}, by variant", f"{backbone}: full HeRo d_m={main_memory_dim}, by α")
        for ax, part, title in zip(row, (left, right), titles):
            if part.height:
                draw(ax, part)
                ax.legend(fontsize=6)
            else:
                ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
            ax.set(ylabel=ylabel, title=f"{title} ({main_layer_set})")
            ax.title.set_fontsize(9)
            ax.grid(alpha=0.3)
    return _save(fig, path)


def _rho_lines(ax, part: pl.DataFrame) -> None:
    for (label,), g in part.group_by("label", maintain_order=True):
        long = (
            layer_values(g, "rho")
            .group_by("layer")
            .agg(pl.col("value").mean().alias("m"), pl.col("value").std().alias("s"))
            .sort("layer")
        )
        ax.errorbar(long["layer"], long["m"], yerr=long["s"].fill_null(0), fmt="o-", ms=3, capsize=2, label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("backbone layer (0-based)")


def _token_lines(ax, part: pl.DataFrame) -> None:
    for (label,), g in part.group_by("label", maintain_order=True):
        edges = np.asarray(g[EDGES][0], dtype=float)
        same = [
            np.asarray(c, dtype=float)
            for c, e in zip(g[COUNTS], g[EDGES])
            if len(c) == len(edges) - 1 and len(e) == len(edges) and np.allclose(e, edges)
        ]
        share = np.mean([c / c.sum() for c in same if c.sum() > 0], axis=0)
        ax.stairs(share, edges * 100.0, label=f"{label} ({len(same)} runs)")
    ax.set_xlabel("per-token parameter skip (%)")


def _layer_long(runs: pl.DataFrame, name: str) -> pl.DataFrame:
    long = (
        layer_values(runs, name)
        .group_by(*KEYS, "layer")
        .agg(pl.col("value").mean())
        .sort(*KEYS, "layer", nulls_last=True)
    )
    label = pl.format("{} {}/{} α={} d_m={} {} knob={}", *(pl.col(k).cast(pl.String).fill_null("–") for k in KEYS))
    return long.select(label.alias("group"), pl.col("layer").cast(pl.String), "value")


def retain_vs_updates(points: pl.DataFrame, path: Path) -> Path | None:
    """One panel per backbone: seed-mean Retain against training updates (log axis), one line per (method, skip
    level), seed-std error bars; untrained runs (0 updates) are left out. ``analysis.training_budget``."""
    trained = points.filter(pl.col("updates") > 0)
    if trained.height == 0:
        return None
    backbones = sorted(trained["backbone"].unique().to_list())
    fig, axes = plt.subplots(1, len(backbones), figsize=(6 * len(backbones), 4.2), squeeze=False)
    for ax, backbone in zip(axes[0], backbones):
        part = trained.filter(pl.col("backbone") == backbone)
        for (method, level), line in part.group_by(["method", "level"], maintain_order=True):
            line = line.sort("updates")
            ax.errorbar(
                line["updates"].to_numpy(),
                line["retain.mean"].to_numpy(),
                yerr=line["retain.std"].fill_null(0.0).to_numpy(),
                marker="o",
                capsize=3,
                label=f"{method}, {level}",
            )
        ax.axhline(100.0, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("training updates")
        ax.set_ylabel("Retain")
        ax.set_title(backbone)
        ax.legend(fontsize=7)
    return _save(fig, path)


def training_trajectory(rows: pl.DataFrame, path: Path) -> Path | None:
    """One panel per (backbone, method, variant): training-batch parameter skip (%) against the update, one line
    per run, labelled by its α or knob and seed (``analysis.trajectory``)."""
    if rows.height == 0:
        return None
    panels = rows.select("backbone", "method", "variant").unique(maintain_order=True).sort(pl.all())
    cols = min(3, panels.height)
    nrows = -(-panels.height // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 3.8 * nrows), squeeze=False)
    for ax, panel in zip(axes.flat, panels.iter_rows(named=True)):
        part = rows.filter(*(pl.col(k) == v for k, v in panel.items()))
        for (alpha, knob, seed, _), line in part.group_by(["alpha", "knob", "seed", "run"], maintain_order=True):
            knob_text = f"knob {knob:.4g}" if knob is not None else f"α {alpha:.3g}"
            steps, skip = line["step"].to_numpy(), line["param_skip"].to_numpy()
            ax.plot(steps, skip, lw=1.0, marker=".", ms=3, label=f"{knob_text}, s{seed}")
        ax.set_xlabel("update")
        ax.set_ylabel("training-batch parameter skip (%)")
        ax.set_title(f"{panel['backbone']} {panel['method']}/{panel['variant']}", fontsize=9)
        ax.legend(fontsize=6, ncol=2)
    for ax in list(axes.flat)[panels.height :]:
        ax.set_visible(False)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
