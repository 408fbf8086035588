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
# # Routing behaviour
#
# **Question.** Where and for whom does the router skip? Per-layer FFN usage,
# the distribution of the per-token skip rate, skip by token type, and the learned
# forget factor ρ per layer (HERO_SPEC §3, §9: none of these are in the paper).

# %%
import polars as pl
from IPython.display import Image, display

from analysis import KEYS, load_runs, summarize
from analysis.execute import figure_dir, results_dirs
from analysis.load import layer_values
from analysis.plots import ffn_usage_heatmap, per_token_skip, rho_per_layer

MAIN = dict(main_alpha=1e-3, main_memory_dim=64, main_layer_set="second_half")
runs = load_runs(results_dirs())
hero = runs.records.filter(pl.col("scored") & (pl.col("method") == "hero")).collect()
out = figure_dir()
print(runs.counts(), f"HeRo runs: {hero.height}")

# %% [markdown]
# ## FFN usage per layer (fraction of tokens that execute the FFN, seed mean)

# %%
path = ffn_usage_heatmap(hero, out / "ffn_usage_heatmap.png")
display(Image(path)) if path else print("no per-layer FFN rates in these records")

# %% [markdown]
# ## Per-token skip distribution

# %%
path = per_token_skip(hero, out / "per_token_skip.png", **MAIN)
display(Image(path)) if path else print("no per-token histograms in these records")

# %% [markdown]
# ## Learned ρ per layer

# %%
path = rho_per_layer(hero, out / "rho_per_layer.png", **MAIN)
display(Image(path)) if path else print("no learned ρ in these records")

# %% [markdown]
# ## Skip by token type, and the answer from these records: which layers skip most?

# %%
by_type = [c for c in hero.columns if c.startswith("skip.by_token_type.")]
if by_type:
    display(summarize(hero, by_type).select(*KEYS, "n", *(f"{c}.mean" for c in by_type)))
usage = (
    layer_values(hero, "per_layer_ffn_rate")
    .group_by("layer")
    .agg(pl.col("value").mean().alias("ffn_usage"))
    .sort("ffn_usage")
)
print("layers by mean FFN usage (lowest = skipped most):", usage.to_dicts())
