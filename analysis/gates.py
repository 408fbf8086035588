"""Executed-only gate and routable-FFN execution rate of run records, including records that predate them.

Two pairs of routing statistics are easily read as each other (``hero.objectives.SkipMeter`` says what
each averages over; ``hero.statistics`` defines them, for ``SkipMeter`` and for this module):

* ``per_layer_mean_gate`` averages g over ALL non-padding tokens, skipped ones included; the scale eq 3
  applies to an executed FFN's output is the mean of g over the executed tokens only,
  ``per_layer_executed_gate``;
* ``param_rate`` is the share of backbone *parameters* a token bypasses; the share of routable
  (token, layer) *FFN calls* that ran is ``ffn_execution_rate``.

Records written before the second of each pair was stored still hold what gives it: the per-layer
execution rates (every layer sees the same tokens, so their mean is the share over (token, layer)
calls), and ``gate_histogram``, the gate over all tokens in bins of width 0.05. With HeRo's rule (FFN
runs iff g ≥ τ) and τ on a bin edge (the default 0.5), the bins at or above τ hold exactly the executed
tokens; their mean gate is bounded by those bins' edges, and again by the exact mean over all tokens
minus the skipped tokens' bins; the estimate is the bins' midpoints, kept inside both bounds. A layer
whose bins above τ do not count exactly its executed tokens (a policy that does not execute by g ≥ τ)
gets no estimate.

``python -m analysis.gates RECORD_OR_DIR ...`` prints both pairs per record, as a markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NamedTuple

from analysis.load import find_runs
from hero import statistics


class GateHistogramError(ValueError):
    """A threshold τ that the record's gate histogram cannot separate at."""


class Gate(NamedTuple):
    """Mean executed gate of one layer: exact (``low == mid == high``) or bounded by a histogram."""

    low: float
    mid: float
    high: float


def ffn_execution_rate(skip: dict) -> float:
    """Share of routable (token, layer) FFN calls that ran: stored, else from the per-layer rates
    (``hero.statistics.ffn_execution_rate``, the definition ``SkipMeter`` stores)."""
    if skip.get("ffn_execution_rate") is not None:
        return float(skip["ffn_execution_rate"])
    return statistics.ffn_execution_rate(list(skip["per_layer_ffn_rate"].values()))


def executed_gate(skip: dict, tau: float = 0.5) -> dict[str, Gate | None]:
    """Per layer, the mean of g over the tokens whose FFN ran: stored, else bounded from ``gate_histogram``.

    None for a layer that executed no token, or whose histogram cannot separate the executed tokens.
    """
    stored = skip.get("per_layer_executed_gate")
    if stored is not None:
        return {layer: None if g is None else Gate(g, g, g) for layer, g in stored.items()}
    out = {}
    for layer, hist in skip["gate_histogram"].items():
        edges, counts = hist["edges"], hist["counts"]
        first = next((i for i, lo in enumerate(edges[:-1]) if abs(lo - tau) < 1e-6), None)
        if first is None:
            raise GateHistogramError(
                f"tau={tau}: not an edge of layer {layer}'s gate histogram; allowed: "
                f"{', '.join(f'{e:g}' for e in edges[1:-1])}"
            )
        above = counts[first:]
        n = sum(above)
        if n == 0 or abs(n - skip["per_layer_ffn_rate"][layer] * skip["tokens"]) > 0.5:
            out[layer] = None
            continue
        lows, highs = edges[first:-1], edges[first + 1 :]
        low = sum(c * e for c, e in zip(above, lows)) / n
        high = sum(c * e for c, e in zip(above, highs)) / n
        mid = (low + high) / 2
        mean_all = skip.get("per_layer_mean_gate", {}).get(layer)
        if mean_all is not None:  # Σ g over executed = Σ g over all − Σ g over skipped, which is bounded too
            total = mean_all * skip["tokens"]
            below = list(zip(counts[:first], edges[:first], edges[1 : first + 1]))
            low = max(low, (total - sum(c * hi for c, _, hi in below)) / n)
            high = min(high, (total - sum(c * lo for c, lo, _ in below)) / n)
            mid = min(max(mid, low), high)
        out[layer] = Gate(low, mid, high)
    return out


def summary(record: dict, tau: float = 0.5) -> dict:
    """Both pairs of statistics of one record's ``skip`` section, per layer and over the run.

    ``executed_gate_run`` is the mean over layers of the per-layer executed gate (each bound separately);
    ``mean_gate_all_tokens`` the per-layer ``per_layer_mean_gate`` as stored.
    """
    skip = record["skip"]
    gates = executed_gate(skip, tau)
    known = [g for g in gates.values() if g is not None]
    run = Gate(*(sum(g[i] for g in known) / len(known) for i in range(3))) if known else None
    return {
        "param_rate": skip["param_rate"],
        "param_share_used": 1.0 - skip["param_rate"],
        "ffn_execution_rate": ffn_execution_rate(skip),
        "per_layer_ffn_rate": skip["per_layer_ffn_rate"],
        "executed_gate": gates,
        "executed_gate_run": run,
        "mean_gate_all_tokens": skip.get("per_layer_mean_gate", {}),
    }


def _span(values) -> str:
    values = [v for v in values if v is not None]
    return f"{min(values):.3f}–{max(values):.3f}" if values else "–"


def markdown(paths, tau: float = 0.5, layers: tuple[int, ...] = ()) -> str:
    """One row per record under ``paths`` that has a ``skip`` section with per-layer FFN rates; ``layers`` adds
    a column of the FFN execution rate of each named layer."""
    records, _ = find_runs(paths)
    rows = [
        "| record | param skip | param share used | FFN execution rate (per layer) | mean gate, all tokens "
        "(per layer) | executed gate per layer, midpoint [bounds] | executed gate, mean over layers |"
        + "".join(f" layer {layer} FFN rate |" for layer in layers),
        "|---|---|---|---|---|---|---|" + "---|" * len(layers),
    ]
    for path in sorted(records):
        record = json.loads(Path(path).read_text())
        if (
            not record.get("skip", {}).get("per_layer_ffn_rate")
            or "gate_histogram" not in record["skip"]
            and "per_layer_executed_gate" not in record["skip"]
        ):
            continue
        s = summary(record, tau)
        gates = [g for g in s["executed_gate"].values() if g is not None]
        run = s["executed_gate_run"]
        rows.append(
            f"| {Path(path).parent.name} | {100 * s['param_rate']:.2f} % | {100 * s['param_share_used']:.1f} % "
            f"| {100 * s['ffn_execution_rate']:.1f} % ({_span(s['per_layer_ffn_rate'].values())}) "
            f"| {_span(s['mean_gate_all_tokens'].values())} "
            f"| {_span(g.mid for g in gates)} [{_span(g.low for g in gates)}, {_span(g.high for g in gates)}] "
            f"| {f'{run.mid:.3f} [{run.low:.3f}, {run.high:.3f}]' if run else '–'} |"
            + "".join(f" {_rate(s['per_layer_ffn_rate'], layer)} |" for layer in layers)
        )
    return "\n".join(rows)


def _rate(rates: dict, layer: int) -> str:
    return f"{100 * rates[str(layer)]:.1f} %" if str(layer) in rates else "–"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m analysis.gates", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="run records or directories searched for them")
    parser.add_argument("--tau", type=float, default=0.5, help="the execution threshold τ (a histogram edge)")
    parser.add_argument(
        "--layers", default="", help="comma-separated layer indices: a column of each one's FFN execution rate"
    )
    args = parser.parse_args(argv)
    try:
        layers = tuple(int(x) for x in args.layers.split(",") if x.strip())
    except ValueError:
        parser.error(f"--layers={args.layers!r}: must be comma-separated layer indices, e.g. 16,29")
    print(markdown(args.paths, args.tau, layers))


if __name__ == "__main__":
    main()
