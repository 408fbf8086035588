"""Per-item outputs of a record (``items.jsonl.gz`` beside ``results.json``) as one polars frame per run.

A scored run writes one row per item of every task (``hero.evaluation.harness.item_rows``). Here each row becomes
the item's additive *score* on its task's primary metric, with the task value as a function of the items' mean
score, so that a task value, Retain and their item-sampling variance are computed from the same numbers:

    kind     per-item score s_i          task value v from the items         dv / d(mean s)
    mean     the metric (acc 0/1, …)     mean(s)                             1
    exp_mean log-probability             exp(mean(s))       (answer_prob)    v
    token    summed log-prob of n_i      inv_ppl exp(Σs/Σn), ppl exp(−Σs/Σn), ±v/n̄ (inv_ppl, ppl), −1/n̄ (loss)
             tokens                      loss −Σs/Σn

``item_frame`` also derives one continuous per-item measure for every multiple-choice task, beside its accuracy:
``p_gold``, the gold choice's probability among the choices (softmax of the summed log-likelihoods), 0–1, whose
mean over items is a task value like any other (``task="<task>:p_gold"``, kind ``mean``).
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import polars as pl

ITEMS_FILENAME = "items.jsonl.gz"
"""Same as ``hero.results.ITEMS_FILENAME`` (a test checks it); not imported so that analysis does not load torch."""
EXP_MEAN = {"answer_prob"}
TOKEN = {"inv_ppl": 1.0, "ppl": -1.0, "loss": None}
P_GOLD = "p_gold"


class ItemsError(ValueError):
    """A record has no per-item outputs, or items that cannot be compared."""


def read_items(path: str | Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def items_path(record_path: str | Path) -> Path:
    return Path(record_path).parent / ITEMS_FILENAME


def item_frame(
    record_path: str | Path, derived: bool = True, path: Path | None = None, primary: dict | None = None
) -> pl.DataFrame:
    """The run's items: task, item, doc, threshold (null: the trained one), metric, kind, score, tokens.

    One row per item of each Retain task (``eval_meta.primary_metric``, or ``primary``); with ``derived`` also
    ``<task>:p_gold`` for each multiple-choice task. ``path``: the items file when it is not beside the record (the
    dense baseline cache's). Raises ``ItemsError`` naming the record when it has no items file.
    """
    path = path or items_path(record_path)
    if not path.is_file():
        raise ItemsError(
            f"{record_path}: no {ITEMS_FILENAME} beside it (written by runs scored since per-item outputs)"
        )
    if primary is None:
        record = json.loads(Path(record_path).read_text())
        primary = (record.get("eval_meta") or {}).get("primary_metric") or {}
    out = []
    for row in read_items(path):
        metric = primary.get(row["task"])
        if metric is None:
            continue
        base = {"task": row["task"], "item": row["item"], "doc": row["doc"], "threshold": row.get("threshold")}
        value = row["metrics"][metric]
        if isinstance(value, list):
            kind, score, tokens = "token", float(value[0]), float(value[1])
        else:
            kind, score, tokens = ("exp_mean" if metric in EXP_MEAN else "mean"), float(value), 1.0
        out.append(base | {"metric": metric, "kind": kind, "score": score, "tokens": tokens})
        if derived and isinstance(row.get("ll"), list) and isinstance(row.get("gold"), int):
            top = max(row["ll"])
            p = math.exp(row["ll"][row["gold"]] - top) / sum(math.exp(x - top) for x in row["ll"])
            out.append(
                base
                | {"task": f"{row['task']}:{P_GOLD}", "metric": P_GOLD, "kind": "mean"}
                | {"score": p, "tokens": 1.0}
            )
    schema = {
        "task": pl.String,
        "item": pl.Int64,
        "doc": pl.String,
        "threshold": pl.Float64,
        "metric": pl.String,
        "kind": pl.String,
        "score": pl.Float64,
        "tokens": pl.Float64,
    }
    return pl.DataFrame(out, schema=schema, orient="row") if out else pl.DataFrame(schema=schema)


def task_value(kind: str, metric: str, score_sum: float, tokens_sum: float, n: int) -> float:
    """A task's value from its items' summed scores and tokens (the table in the module docstring)."""
    if kind == "mean":
        return score_sum / n
    if kind == "exp_mean":
        return math.exp(score_sum / n)
    if metric not in TOKEN:
        raise ItemsError(f"metric {metric!r}: no token-weighted aggregation known (known: {sorted(TOKEN)})")
    mean_ll = score_sum / tokens_sum
    return {"inv_ppl": math.exp(mean_ll), "ppl": math.exp(-mean_ll), "loss": -mean_ll}[metric]


def slope(kind: str, metric: str, value: float, mean_tokens: float) -> float:
    """dv / d(mean score) at ``value``: how an item's score moves its task's value (linearisation)."""
    if kind == "mean":
        return 1.0
    if kind == "exp_mean":
        return value
    return {"inv_ppl": value / mean_tokens, "ppl": -value / mean_tokens, "loss": -1.0 / mean_tokens}[metric]


def task_values(items: pl.DataFrame) -> dict[str, float]:
    """{task: value} of one run's items (one threshold)."""
    grouped = items.group_by("task", "kind", "metric").agg(
        pl.col("score").sum().alias("s"), pl.col("tokens").sum().alias("t"), pl.len().alias("n")
    )
    return {
        r["task"]: task_value(r["kind"], r["metric"], r["s"], r["t"], r["n"]) for r in grouped.iter_rows(named=True)
    }
