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
# # α sweep: how the skip-loss weight moves skip and quality
#
# **Question.** How does the realized skip rate respond to α (HERO_SPEC §5, §8:
# 13.19 → 26.87 % for α = 1e-4 → 1e-3), and what does it cost in Retain? Retain in
# Table 2 is against the α = 1e-3 run; the quality–cost view uses Dense.

# %%
import matplotlib.pyplot as plt
import polars as pl
from IPython.display import Image, Markdown, display

from analysis import build_table, load_runs, paper_tables, resolve_baselines, summarize, with_retain
from analysis.execute import figure_dir, results_dirs

MAIN_ALPHA, MAIN_DIM, MAIN_LAYERS = 1e-3, 64, "second_half"
runs = load_runs(results_dirs())
frame = runs.records.collect()
print(runs.counts())

# %% [markdown]
# ## Table 2 (baseline: the α = 1e-3 run)

# %%
table2 = build_table(frame, paper_tables(MAIN_ALPHA, MAIN_DIM, MAIN_LAYERS)[1], runs.tasks)
display(Markdown(table2.to_markdown()))

# %% [markdown]
# ## Realized skip and Retain (vs Dense) against α, seed mean ± std

# %%
dense = resolve_baselines(frame, "method=dense", "curve baseline", runs.tasks)
sweep = (
    with_retain(frame, dense)
    .filter(
        pl.col("scored")
        & (pl.col("method") == "hero")
        & (pl.col("variant") == "full")
        & (pl.col("memory_dim") == MAIN_DIM)
        & (pl.col("layer_set") == MAIN_LAYERS)
    )
    .with_columns((pl.col("skip.param_rate") * 100).alias("skip"))
)
stats = summarize(sweep, ["skip", "retain"]).sort("alpha")
fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
a.errorbar(stats["alpha"], stats["skip.mean"], yerr=stats["skip.std"], fmt="o-", capsize=3)
a.set(xscale="log", xlabel="α", ylabel="realized parameter skip (%)")
b.errorbar(stats["alpha"], stats["retain.mean"], yerr=stats["retain.std"], fmt="o-", capsize=3)
b.set(xscale="log", xlabel="α", ylabel="Retain vs Dense (%)")
fig.tight_layout()
path = figure_dir() / "alpha_sweep.png"
fig.savefig(path, dpi=110)
plt.close(fig)
display(Image(path))

# %% [markdown]
# ## Answer, from these records: is the realized skip monotone in α?

# %%
skips = stats["skip.mean"].to_list()
monotone = all(x <= y for x, y in zip(skips, skips[1:]))
print(f"skip by α: {dict(zip(stats['alpha'].to_list(), [round(s, 2) for s in skips]))}; monotone in α: {monotone}")
stats.select("alpha", "n", "skip.mean", "skip.std", "retain.mean", "retain.std", "retain.ci_lo", "retain.ci_hi")
