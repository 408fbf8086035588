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
# # Memory dimension
#
# **Question.** Does the depth-memory dimension d_m (HERO_SPEC §2–3; paper: 32 / 64
# / 128 / 256 all within 73.61–73.66 average accuracy) change quality or skip? Table 4
# names its Retain baseline: the 64-dim run. Differences are paired over shared seeds.

# %%
import matplotlib.pyplot as plt
from IPython.display import Image, Markdown, display

from analysis import build_table, load_runs, paper_tables
from analysis.execute import figure_dir, results_dirs

MAIN_ALPHA, MAIN_DIM, MAIN_LAYERS = 1e-3, 64, "second_half"
runs = load_runs(results_dirs())
frame = runs.records.collect()
print(runs.counts())

# %%
table4 = build_table(frame, paper_tables(MAIN_ALPHA, MAIN_DIM, MAIN_LAYERS)[3], runs.tasks)
display(Markdown(table4.to_markdown()))

# %%
stats = table4.stats.sort("memory_dim")
fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
a.errorbar(stats["memory_dim"], stats["retain.mean"], yerr=stats["retain.std"], fmt="o-", capsize=3)
a.set(xscale="log", xlabel="memory dim", ylabel="Retain vs 64-dim run (%)")
b.errorbar(stats["memory_dim"], stats["skip.mean"], yerr=stats["skip.std"], fmt="o-", capsize=3)
b.set(xscale="log", xlabel="memory dim", ylabel="realized parameter skip (%)")
fig.tight_layout()
path = figure_dir() / "memory_dim.png"
fig.savefig(path, dpi=110)
plt.close(fig)
display(Image(path))

# %% [markdown]
# ## Answer, from these records
# A dimension differs from the 64-dim run when its paired 95 % t interval of
# Δ Retain excludes 0.

# %%
paired = table4.paired.select("memory_dim", "n", "retain.mean", "retain.ci_lo", "retain.ci_hi")
paired = paired.with_columns(((paired["retain.ci_lo"] > 0) | (paired["retain.ci_hi"] < 0)).alias("differs"))
paired
