"""Net compute skip of run records: FFN FLOPs saved minus router and adapter FLOPs, over the backbone's.

The paper's parameter skip (``skip.param_rate``) charges neither the router nor the adapter. Records
written since ``hero.model.flops.net_compute`` carry ``skip.net_compute_rate`` and its breakdown
``skip.compute``; for a record that predates them, the same quantity is computed here from what the
record holds (the per-layer FFN execution rates, the router options, the method, ``data.max_length``)
and the backbone's shape, read from its ``config.json`` (``--backbone-config``; a bed's backbone lies
under ``<paths.cache>/<bed>/<hash>/backbone/``). Router FLOPs per method:

    hero         HeRo's router from the record's router options (``hero.model.flops.router_flops``),
                 adapters of width d_r (``RouterConfig.resolved_adapter_dim``)
    skipgpt_rt   RMS normalisation + Linear(d, 2) per routable layer, no adapter
    random_skip  no router arithmetic; HeRo's adapters when ``method.adapter`` is true
    static_drop  none, no adapter

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

ROUTED = ("hero", "skipgpt_rt", "random_skip", "static_drop")


def backbone_shape(path: str | Path):
    """``hero.model.flops.Shape`` of a transformers ``config.json`` (the file or its directory)."""
    from hero.model.flops import Shape

    path = Path(path).expanduser()
    config = json.loads((path / "config.json" if path.is_dir() else path).read_text())
    return Shape.from_config(SimpleNamespace(**config))


def router_and_adapter(record: dict, shape) -> tuple[list[float], int | None]:
    """(router FLOPs per token at each routable block, adapter width or None) of a routed record's method."""
    from hero.model import RouterConfig
    from hero.model.controls import matched_local_width
    from hero.model.flops import router_flops, skipgpt_router_flops

    n = len(record["routable_layers"])
    method = record["method"]
    config = RouterConfig.from_dict(record.get("router") or record["config"]["router"])
    if method == "hero":
        if config.local_head_hidden == "matched":
            width = matched_local_width(config, shape.hidden, n)
            config = RouterConfig.from_dict({**config.to_dict(), "local_head_hidden": width})
        adapter = config.resolved_adapter_dim(shape.hidden)
        return [router_flops(shape, config, j, n) for j in range(1, n + 1)], adapter
    if method == "skipgpt_rt":
        return [skipgpt_router_flops(shape)] * n, None
    if method == "random_skip":
        adapter = config.resolved_adapter_dim(shape.hidden) if record["config"]["method"].get("adapter") else None
        return [0] * n, adapter
    if method == "static_drop":
        return [0] * n, None
    raise ValueError(f"{method!r}: net compute is defined for routed methods ({', '.join(ROUTED)})")


def record_net_compute(record: dict, shape=None, context_length: int | None = None) -> dict:
    """``{"net_compute_rate", "compute"}`` of a routed record: stored when it has them, else computed (needs
    ``shape``; ``context_length`` defaults to the run's ``data.max_length``)."""
    skip = record["skip"]
    if skip.get("net_compute_rate") is not None and context_length is None:
        return {"net_compute_rate": skip["net_compute_rate"], "compute": skip["compute"]}
    if shape is None:
        raise ValueError("this record predates skip.net_compute_rate: give the backbone's shape (--backbone-config)")
    from hero.model.flops import net_compute

    router, adapter = router_and_adapter(record, shape)
    length = context_length or int(record["config"]["data"]["max_length"])
    return net_compute(shape, skip["per_layer_ffn_rate"], router, adapter, length)


def rows(paths, shape=None, context_length: int | None = None) -> list[dict]:
    """One row per completed routed record under ``paths``: identity, both skips, the compute breakdown, Retain."""
    records, _ = find_runs(paths)
    out = []
    for path in sorted(records):
        record = json.loads(Path(path).read_text())
        if record.get("status", "completed") != "completed" or record.get("method") not in ROUTED:
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
