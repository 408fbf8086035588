"""``python -m hero.bench eval``: one router scored by today's evaluation path and the fast one, side by side.

Config ``conf/bench_eval.yaml``. The SmolLM2 bed's backbone with one router (a finished run's trained tensors, or
HeRo's router and adapters with seeded random weights, their gate logits shifted to a trained router's skip) is
scored on each suite three times in one process, at the configured thread count, wall and CPU clock per variant
and per task (lm-eval's own split, ``eval_meta``), after an untimed pass over two items of every task (tasks
loaded, kernels warm: the first variant pays nothing the others do not):

    old    eval.diagnostics=true, eval.prefix_cache=false, eval.labelled_logits=false: every task, the full forward
           and the head at every position (the path before issue 59)
    cold   eval.diagnostics=false, the prefix's states computed and written to a fresh directory (first router)
    warm   the same, the process's memory emptied, the states read back from that directory (every later router,
           threshold and seed on the backbone)

Each fast variant's Retain-task scores must equal old's within ``tolerance`` (float order); the bench exits 1
otherwise. Prints one line per suite and variant and writes ``bench_eval.json`` (every figure, the CPU, the cache's
bytes on disk) into ``out_dir``.
"""

from __future__ import annotations

import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from hero.errors import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf"
VARIANTS = ("old", "cold", "warm")
SUITES = ("smollm2", "paper7_cpu")


def check(cfg: DictConfig) -> None:
    unknown = [s for s in cfg.suites if s not in SUITES]
    if not cfg.suites or unknown:
        raise ConfigError(f"suites={list(cfg.suites)!r}: allowed suites are {', '.join(SUITES)}")
    if not 0 <= cfg.skip < 1:
        raise ConfigError(f"skip={cfg.skip!r}: must lie in [0, 1)")
    if not isinstance(cfg.threads, int) or cfg.threads <= 0:
        raise ConfigError(f"threads={cfg.threads!r}: must be a positive integer")
    if cfg.router is not None and not (Path(cfg.router) / "results.json").is_file():
        raise ConfigError(f"router={cfg.router!r}: not a finished run's directory (no results.json there)")


def _train_cfg(cfg: DictConfig, suite: str, root: Path):
    overrides = [
        "experiment=smollm2_cpu",
        f"eval={suite}",
        f"seed={cfg.seed}",
        f"paths.cache={cfg.cache}",
        f"paths.root={root}",
        "logger=none",
        *(cfg.overrides.get(suite) or []),
    ]
    if GlobalHydra.instance().is_initialized():  # under ``python -m hero.bench eval``: the same conf/ directory
        return compose(config_name="train", overrides=overrides)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def _router(spec, loaded, router: str | None, seed: int, skip: float = 0.06):
    """The prepared model: the run's trained tensors, or HeRo's with seeded random weights whose gate logits are
    shifted (the local head's output bias) so that a share ``skip`` of the (token, routable layer) gates of 16 of
    the bed's training conversations falls below τ: both branches run, at about a trained router's skip."""
    prepared = spec.method.prepare(spec, loaded.backbone.model, loaded.backbone.tokenizer, loaded.layers, loaded.bed)
    model = prepared.model
    if router is not None:
        spec.method.load(prepared, Path(router))
        return model.eval()
    from hero.bench.train import bed_items
    from hero.data import collate
    from hero.model import last_records

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and not name.endswith(".eta"):
                p.copy_(torch.randn(p.shape, generator=generator) / max(1, p.shape[-1]) ** 0.5)
    items = bed_items(loaded.bed, loaded.backbone.tokenizer, int(spec.data.max_length))[:16]
    batch = collate(items, loaded.backbone.tokenizer.pad_token_id)
    model.eval()
    with torch.no_grad():
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
        valid = batch["attention_mask"].bool()
        gates = torch.cat([r.gate[valid].float() for r in last_records(model)]).clamp(1e-6, 1 - 1e-6)
        tau = torch.tensor(float(model.hero_router.config.tau))
        shift = torch.logit(tau) - torch.logit(torch.quantile(gates, skip))
        model.hero_router.local_head[2].bias.add_(shift)
    return model


def _variant_eval(eval_cfg, variant: str, directory: Path):
    eval_cfg = OmegaConf.create(OmegaConf.to_container(eval_cfg, resolve=True))
    eval_cfg.diagnostics = variant == "old"
    eval_cfg.prefix_cache = variant != "old"
    eval_cfg.labelled_logits = variant != "old"
    eval_cfg.prefix_cache_dir = str(directory)
    return eval_cfg


def _warmup_eval(eval_cfg):
    """Two items of every task, every task scored, nothing cached: loads the tasks and warms the kernels untimed."""
    eval_cfg = OmegaConf.create(OmegaConf.to_container(eval_cfg, resolve=True))
    eval_cfg.diagnostics, eval_cfg.prefix_cache, eval_cfg.limit = True, False, None
    for task in eval_cfg.tasks.values():
        if task.get("sample") is not None:
            task.sample = 2
        else:
            task.limit = 2
    return eval_cfg


def _executed_share(model) -> float | None:
    """Share of (token, routable layer) pairs whose FFN ran in the model's last forward (padding included)."""
    from hero.model import last_records

    records = last_records(model)
    return float(sum(r.ffn_executed.float().mean() for r in records) / len(records)) if records else None


def _bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*.pt"))


def run(cfg: DictConfig) -> dict:
    from hero.evaluation import evaluate_suite
    from hero.evaluation import prefix as eval_prefix
    from hero.spec import RunSpec

    check(cfg)
    torch.set_num_threads(int(cfg.threads))
    out = {
        "config": OmegaConf.to_container(cfg, resolve=True),
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "suites": {},
    }
    failed = []
    with tempfile.TemporaryDirectory(prefix="hero-bench-eval-") as tmp:
        for suite in cfg.suites:
            spec = RunSpec.resolve(_train_cfg(cfg, suite, Path(tmp) / "outputs"))
            loaded = spec.load()
            model = _router(spec, loaded, cfg.router, int(cfg.seed), float(cfg.skip))
            directory = Path(tmp) / f"eval_prefix_{suite}"
            evaluate_suite(model, loaded.backbone.tokenizer, _warmup_eval(spec.eval), loaded.bed)
            rows = {}
            for variant in VARIANTS:
                eval_prefix._memory.clear()
                before = dict(eval_prefix.STATS)
                start, cpu = time.time(), time.process_time()
                scores, meta = evaluate_suite(
                    model, loaded.backbone.tokenizer, _variant_eval(spec.eval, variant, directory), loaded.bed
                )
                rows[variant] = {
                    "wall_s": time.time() - start,
                    "cpu_s": time.process_time() - cpu,
                    "tasks_s": {name: task["wall_time_s"] for name, task in meta["tasks"].items()},
                    "scores": {name: scores[name][metric] for name, metric in meta["primary_metric"].items()},
                    "diagnostics": {name: scores[name][m] for name, m in meta["diagnostic_metric"].items()},
                    "prefix": {k: eval_prefix.STATS[k] - before[k] for k in before},
                    "routed_ffn_share": _executed_share(model),
                    "cache_bytes": _bytes(directory),
                }
            old = rows["old"]
            for variant in VARIANTS[1:]:
                row = rows[variant]
                row["x_vs_old"] = old["wall_s"] / row["wall_s"]
                row["x_cpu_vs_old"] = old["cpu_s"] / row["cpu_s"]
                row["max_abs_diff"] = max(abs(row["scores"][t] - old["scores"][t]) for t in old["scores"])
                if row["max_abs_diff"] > cfg.tolerance:
                    failed.append(f"{suite}/{variant}: Retain-task scores differ from old by {row['max_abs_diff']:.3g}")
            out["suites"][suite] = rows
            for variant in VARIANTS:
                row = rows[variant]
                extra = (
                    f" ×{row['x_vs_old']:.2f} (CPU ×{row['x_cpu_vs_old']:.2f}), max |Δ score| {row['max_abs_diff']:.2g}"
                    if variant != "old"
                    else ""
                )
                print(
                    f"  {suite:10s} {variant:4s} {row['wall_s']:7.1f} s wall, {row['cpu_s']:7.1f} s CPU{extra}; "
                    f"prefix hits {row['prefix']['hits']}, "
                    f"misses {row['prefix']['misses']}; cache {row['cache_bytes'] / 2**20:.0f} MiB",
                    flush=True,
                )
            shutil.rmtree(directory, ignore_errors=True)
    total = {v: sum(out["suites"][s][v]["wall_s"] for s in cfg.suites) for v in VARIANTS}
    cpu_total = {v: sum(out["suites"][s][v]["cpu_s"] for s in cfg.suites) for v in VARIANTS}
    out["total_s"], out["total_cpu_s"] = total, cpu_total
    out["x_total"] = {v: total["old"] / total[v] for v in VARIANTS[1:]}
    out["x_total_cpu"] = {v: cpu_total["old"] / cpu_total[v] for v in VARIANTS[1:]}
    out["failed"] = failed
    print(
        f"  both suites: old {total['old']:.0f} s, cold {total['cold']:.0f} s (×{out['x_total']['cold']:.2f}), "
        f"warm {total['warm']:.0f} s (×{out['x_total']['warm']:.2f}); CPU ×{out['x_total_cpu']['cold']:.2f} cold, "
        f"×{out['x_total_cpu']['warm']:.2f} warm",
        flush=True,
    )
    for line in failed:
        print("  FAILED " + line, flush=True)
    return out
