# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Ablations at matched skip
#
# **Question.** Does each part of the router (position state, aux state, history
# branch, memory read) matter once the variants are compared at the *same realized
# skip rate*, rather than at the same α? The paper (HERO_SPEC §8) compares them at
# roughly matched skip only; here every variant's quality–cost curve gets a
# monotone fit and is read off at the reference curve's skip levels.
#
# Records: `HERO_RESULTS_DIRS` (see `analysis.execute`). Retain is against the
# Dense run (curves) and against full HeRo (Table 3), named in every output.

# %%
import polars as pl
from IPython.display import Image, Markdown, display

from analysis import (
    area_between,
    build_table,
    curve_points,
    curves,
    load_runs,
    matched_skip,
    paper_tables,
    reference_curves,
    resolve_baselines,
    with_retain,
)
from analysis.execute import figure_dir, results_dirs
from analysis.plots import quality_cost

MAIN_ALPHA, MAIN_DIM, MAIN_LAYERS = 1e-3, 64, "second_half"
runs = load_runs(results_dirs())
frame = runs.records.collect()
print(runs.counts())
runs.problems.select("kind", "path", "reason")

# %% [markdown]
# ## Table 3 at the main α (baseline: full HeRo)

# %%
spec = paper_tables(MAIN_ALPHA, MAIN_DIM, MAIN_LAYERS)[2]
table3 = build_table(frame, spec, runs.tasks)
display(Markdown(table3.to_markdown()))

# %% [markdown]
# ## Quality–cost curves of the ablations (Retain vs Dense)

# %%
dense = resolve_baselines(frame, "method=dense", "curve baseline", runs.tasks)
ablations = with_retain(frame, dense).filter(
    pl.col("scored")
    & (pl.col("method") == "hero")
    & (pl.col("memory_dim") == MAIN_DIM)
    & (pl.col("layer_set") == MAIN_LAYERS)
)
points = curve_points(ablations, ["retain"])
retain_curves = curves(points, "retain")
reference = reference_curves(retain_curves, "variant=full")
display(Image(quality_cost(points, {"retain": "Retain vs Dense (%)"}, figure_dir() / "ablation_curves.png")))

# %% [markdown]
# ## Retain at matched skip, and the area between curves

# %%
matched = matched_skip(retain_curves, reference)
areas = area_between(retain_curves, reference)
display(matched.select("variant", "skip", "in_range", "quality", "reference_quality", "difference"))
areas.select("variant", "skip_lo", "skip_hi", "area", "mean_gap").sort("mean_gap")

# %% [markdown]
# ## Answer, from these records
# The variant with the most negative mean gap loses the most quality per unit of
# skip; a gap whose magnitude is within the seed std of Table 3 is not evidence.

# %%
worst = areas.drop_nulls("mean_gap").sort("mean_gap").row(0, named=True)
spread = table3.stats["retain.std"].max()
print(
    f"largest loss at matched skip: {worst['variant']} (mean gap {worst['mean_gap']:+.2f} Retain points over "
    f"skip {worst['skip_lo']:.1f}–{worst['skip_hi']:.1f} %); largest seed std in Table 3: {spread:.2f}"
)
