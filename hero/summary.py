"""The short human summary printed at the end of every run (and so of ``make demo``)."""

from __future__ import annotations

NEXT_COMMANDS = (
    "python train.py -m ablation=no_memory_read seed=42,43,44     # an ablation over three seeds",
    "python calibrate.py ablation=full,no_history target_skip=0.2  # α per variant at matched skip",
    "python train.py -m ablation=full,no_history seed=42,43,44 alpha=calibrated calibration.target_skip=0.2"
    "  # the matched sweep",
    "python -m analysis.report outputs --out report                # tables, curves and plots from every record",
)
"""Printed after every run, in the order a new user takes them; ``tests/test_newcomer.py`` runs them as printed."""


def format_summary(record: dict, path: str) -> str:
    """Variant, realized skip, task scores, Retain vs its named baseline, wall time, where things are."""
    skip = record.get("skip") or {}
    lines = [
        "─" * 72,
        f"HeRo run  {record['method']} / {record['variant']}   backbone {record['backbone']}   "
        f"layers {record['routable_layers']}   α={record['alpha']:g}   seed {record['seed']}",
    ]
    card = record.get("method_card")
    if card:
        lines[-1] += f"   {record['knob_name']}={record['knob']:g}"
        if card.get("removed_layers") is not None:
            lines.append(f"removed FFNs (lowest Block Influence)  {card['removed_layers']}")
    if skip:
        lines.append(
            f"realized parameter skip  {100 * skip['param_rate']:.2f} %"
            + (f"  (ceiling {100 * skip['max_param_rate']:.1f} %)" if "max_param_rate" in skip else "")
        )
        lines.append(
            "FFN execution per layer  "
            + "  ".join(f"{layer}: {rate:.2f}" for layer, rate in skip.get("per_layer_ffn_rate", {}).items())
        )
        if skip.get("by_token_type"):
            lines.append(
                "FFN execution per token type  "
                + "  ".join(f"{name}: {rate:.2f}" for name, rate in skip["by_token_type"].items() if rate is not None)
            )
    primary = (record.get("eval_meta") or {}).get("primary_metric", {})
    for task, metrics in (record.get("eval") or {}).items():
        metric = primary.get(task) or next(iter(metrics))
        lines.append(f"  {task:<14} {metric:<12} {metrics[metric]:.4g}")
    retain = record.get("retain")
    if retain and retain["value"] is None:
        lines.append(f"Retain undefined  ({retain['error']})")
    elif retain:
        lines.append(
            f"Retain {retain['value']:.2f}  (baseline: {retain['baseline']}; tasks: {', '.join(retain['tasks'])})"
        )
    if record.get("train"):
        lines.append(
            f"final loss {record['train']['final_loss']:.4f} (LM {record['train']['final_lm_loss']:.4f}) "
            f"after {record['train']['steps']} updates"
        )
    lines.append(f"wall time {record['wall_time_s']:.0f} s")
    lines.append(f"record    {path}")
    wandb = record.get("wandb")
    if wandb:
        hint = (
            f"   (upload: wandb sync {wandb['dir'].rsplit('/files', 1)[0]})" if wandb.get("mode") == "offline" else ""
        )
        lines.append(f"W&B       {wandb['mode']} run {wandb['run_id']} in group {wandb['group']}{hint}")
    lines.append("next:")
    lines.extend(f"  {command}" for command in NEXT_COMMANDS)
    lines.append("─" * 72)
    return "\n".join(lines)
