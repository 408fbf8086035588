"""Net compute skip of run records: FFN FLOPs saved minus router and adapter FLOPs, over the backbone's.

The paper's parameter skip (``skip.param_rate``) charges neither the router nor the adapter. Every record written
since ``hero.scoring`` charges both carries ``skip.net_compute_rate`` and its breakdown ``skip.compute`` (routed
methods' records since ``hero.model.flops.net_compute``; earlier ones neither). For a record without them, or at
another context length (``--context-length``), the same quantity is computed here from what the record holds (the
per-layer FFN execution rates, its resolved config, ``data.max_length``) and the backbone's shape, read from its
``config.json`` (``--backbone-config``; a bed's backbone lies under ``<paths.cache>/<bed>/<hash>/backbone/``). What a
method's router and adapters cost is the method's own statement, ``compute_cost`` in ``hero.methods``: nothing here
knows a method by name.

``python -m analysis.compute RECORD_OR_DIR ... --backbone-config PATH`` prints one markdown row per
record and one per (method, variant, knob: α or the baseline's knob) with the mean ± std over its seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from types import SimpleNamespace

from analysis.load import find_runs


def backbone_shape(path: str | Path):
    """``hero.model.flops.Shape`` of a transformers ``config.json`` (the file or its directory)."""
    from hero.model.flops import Shape

    path = Path(path).expanduser()
    config = json.loads((path / "config.json" if path.is_dir() else path).read_text())
    return Shape.from_config(SimpleNamespace(**config))


def record_net_compute(record: dict, shape=None, context_length: int | None = None) -> dict:
    """``{"net_compute_rate", "compute"}`` of a record: stored when it has them (and no other ``context_length`` is
    asked), else computed from the record with its method's ``compute_cost`` (needs ``shape``; ``context_length``
    defaults to the run's ``data.max_length``)."""
    skip = record["skip"]
    if skip.get("net_compute_rate") is not None and context_length is None:
        return {"net_compute_rate": skip["net_compute_rate"], "compute": skip["compute"]}
    if shape is None:
        raise ValueError("this record predates skip.net_compute_rate: give the backbone's shape (--backbone-config)")
    from hero.methods import get
    from hero.model.flops import net_compute

    router, adapter = get(record["method"]).compute_cost(record["config"], shape, len(record["routable_layers"]))
    length = context_length or int(record["config"]["data"]["max_length"])
    return net_compute(shape, skip["per_layer_ffn_rate"], router, adapter, length)


def rows(paths, shape=None, context_length: int | None = None) -> list[dict]:
    """One row per completed record under ``paths``: identity, both skips, the compute breakdown, Retain.

    Without ``shape``, a record that predates ``skip.net_compute_rate`` and routes nothing (no router: it skips
    nothing and pays nothing) is left out; a routed one is an error naming ``--backbone-config``."""
    records, _ = find_runs(paths)
    out = []
    for path in sorted(records):
        record = json.loads(Path(path).read_text())
        if record.get("status", "completed") != "completed" or "skip" not in record:
            continue
        unpriced = record["skip"].get("net_compute_rate") is None and shape is None
        if unpriced and record.get("router_params") is None:
            continue
        net = record_net_compute(record, shape, context_length)
        compute = net["compute"]
        rates = record["skip"]["per_layer_ffn_rate"]
        out.append(
            {
                "run": Path(path).parent.name,
                "method": record["method"],
                "variant": record["variant"],
                "seed": record["seed"],
                "knob": record["knob"] if record.get("knob") is not None else record.get("alpha"),
                "param_skip": record["skip"]["param_rate"],
                "ffn_execution": sum(rates.values()) / len(rates),
                "ffn_saved": compute["ffn_saved_share"],
                "router": compute["router_share"],
                "adapter": compute["adapter_share"],
                "net_compute": net["net_compute_rate"],
                "retain": (record.get("retain") or {}).get("value"),
            }
        )
    return out


COLUMNS = (
    ("param_skip", "param skip"),
    ("ffn_execution", "FFN calls run"),
    ("ffn_saved", "FFN FLOPs saved"),
    ("router", "router"),
    ("adapter", "adapter"),
    ("net_compute", "net compute skip"),
)


def _pct(values: list[float]) -> str:
    if len(values) == 1:
        return f"{100 * values[0]:.2f}"
    return f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"


def markdown(table: list[dict]) -> str:
    """Per-run rows, then per (method, variant, knob) mean ± std (sample std over seeds); shares in % of dense FLOPs."""
    head = "| run | " + " | ".join(label for _, label in COLUMNS) + " | Retain |"
    rule = "|" + "---|" * (len(COLUMNS) + 2)
    lines = [head, rule]
    for r in table:
        retain = "–" if r["retain"] is None else f"{r['retain']:.1f}"
        lines.append(f"| {r['run']} | " + " | ".join(_pct([r[k]]) for k, _ in COLUMNS) + f" | {retain} |")
    groups: dict[tuple, list[dict]] = {}
    for r in table:
        groups.setdefault((r["method"], r["variant"], r["knob"]), []).append(r)
    lines += ["", "| method / variant @ knob | runs | " + " | ".join(label for _, label in COLUMNS) + " | Retain |"]
    lines.append("|" + "---|" * (len(COLUMNS) + 3))
    for (method, variant, knob), runs in groups.items():
        retains = [r["retain"] for r in runs if r["retain"] is not None]
        retain = "–" if not retains else f"{retains[0]:.1f}"
        if len(retains) > 1:
            retain = f"{statistics.mean(retains):.1f} ± {statistics.stdev(retains):.1f}"
        lines.append(
            f"| {method} / {variant} @ {knob:.4g} | {len(runs)} | "
            + " | ".join(_pct([r[k] for r in runs]) for k, _ in COLUMNS)
            + f" | {retain} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m analysis.compute", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="run records or directories searched for them")
    parser.add_argument(
        "--backbone-config", help="the backbone's config.json (or its directory), for records without skip.compute"
    )
    parser.add_argument(
        "--context-length",
        type=int,
        help="sequence length T of the attention cost (default: each run's data.max_length)",
    )
    args = parser.parse_args(argv)
    shape = backbone_shape(args.backbone_config) if args.backbone_config else None
    print(markdown(rows(args.paths, shape, args.context_length)))


if __name__ == "__main__":
    main()
