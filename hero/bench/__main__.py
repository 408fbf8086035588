"""``python -m hero.bench``: dense vs HeRo-routed prefill / decode speed (issue 5), Hydra config ``conf/bench.yaml``.

    python -m hero.bench                                   # CPU defaults (random Llama, d = 1024)
    python -m hero.bench router.ffn_skip=0.5 prefill.seq=[512]
    python -m hero.bench device=cuda shape=llama3_1_8b prefill.max_tokens=0
    python -m hero.bench shape=smollm2_135m                # the SmolLM2-135M shape, second half routable
    python -m hero.bench train                             # one SmolLM2 training update by phase (hero.bench.train)
    python -m hero.bench eval                              # one router scored by the old and the fast path (hero.bench.evaluation)

Prints one line per shape and writes two run records (``dense`` and ``hero``, schema
of ``hero/results.py``, figures under ``bench``) plus ``bench.json`` into ``out_dir``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")

SHAPES = {
    # Llama-3.1-8B: d 4096, 32 layers, FFN 14336, 32 query / 8 KV heads, 128256 tokens.
    "llama3_1_8b": dict(hidden=4096, layers=32, intermediate=14336, heads=32, kv_heads=8, vocab=128256),
    # SmolLM2-135M, the real backbone's shape (random weights): d 576, 30 layers, FFN 1536, 9 query / 3 KV heads.
    "smollm2_135m": dict(hidden=576, layers=30, intermediate=1536, heads=9, kv_heads=3, vocab=49152),
    "mid1024": dict(hidden=1024, layers=8, intermediate=2816, heads=16, kv_heads=8, vocab=8192),
    "mid512": dict(hidden=512, layers=8, intermediate=1376, heads=8, kv_heads=8, vocab=4096),
    "tiny": dict(hidden=64, layers=4, intermediate=160, heads=4, kv_heads=2, vocab=97),
}


def resolve(cfg: DictConfig) -> tuple[torch.device, torch.dtype]:
    from hero.errors import ConfigError

    if cfg.shape is not None:
        if cfg.shape not in SHAPES:
            raise ConfigError(f"shape={cfg.shape!r}: allowed presets are {', '.join(SHAPES)} (or null)")
        for key, value in SHAPES[cfg.shape].items():
            cfg.model[key] = value
        cfg.model.name = f"random_{cfg.shape}"
    device = cfg.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if cfg.dtype == "auto":
        dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    elif cfg.dtype in dtypes:
        dtype = dtypes[cfg.dtype]
    else:
        raise ConfigError(f"dtype={cfg.dtype!r}: allowed values are auto, {', '.join(dtypes)}")
    if cfg.clock not in ("wall", "process"):
        raise ConfigError(f"clock={cfg.clock!r}: allowed values are wall, process")
    if not 0.0 <= float(cfg.router.ffn_skip) <= 1.0:
        raise ConfigError(f"router.ffn_skip={cfg.router.ffn_skip!r}: must lie in [0, 1]")
    return torch.device(device), dtype


def run(cfg: DictConfig) -> dict:
    """Build, measure, write the records; returns the full result (also ``bench.json``)."""
    from hero.bench.records import write_records
    from hero.bench.runner import build, measure_all

    start = time.time()
    device, dtype = resolve(cfg)
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    bench = build(cfg.model, cfg.router, cfg.layers, device, dtype, seed=int(cfg.seed), clock=cfg.clock)
    if cfg.compile:
        for model in (bench.dense, bench.routed):
            model.forward = torch.compile(model.forward, dynamic=True)
    mode = (
        f"trained router {cfg.router.checkpoint}" if cfg.router.checkpoint else f"forced FFN skip {cfg.router.ffn_skip}"
    )
    print(
        f"hero.bench: {cfg.model.name} (d={bench.shape.hidden}, {bench.shape.layers} layers, FFN {bench.shape.intermediate}), "
        f"routable {bench.layers}, {mode}, {device} {str(dtype).removeprefix('torch.')}, threads {torch.get_num_threads()}; "
        f"median of interleaved repeats, {cfg.clock} clock",
        flush=True,
    )
    results = measure_all(bench, cfg, log=lambda line: print("  " + line, flush=True))
    paths = write_records(cfg, bench, results, device, dtype, wall_time_s=time.time() - start)
    for path in paths:
        print(f"  wrote {path}")
    return results


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="bench")
def main(cfg: DictConfig) -> None:
    OmegaConf.set_struct(cfg, False)
    run(cfg)


def _write(out: dict, path: Path) -> None:
    """A benchmark's JSON output at ``path`` (its directory made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"  wrote {path}")


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="bench_train")
def train_main(cfg: DictConfig) -> None:
    """``python -m hero.bench train ...``: the training benchmark, config ``conf/bench_train.yaml``."""
    from hero.bench.train import run as run_train

    _write(run_train(cfg), Path(cfg.out_dir) / "bench_train.json")


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="bench_eval")
def eval_main(cfg: DictConfig) -> None:
    """``python -m hero.bench eval ...``: evaluation, old path against the fast one, config ``conf/bench_eval.yaml``."""
    from hero.bench.evaluation import run as run_eval

    out = run_eval(cfg)
    _write(out, Path(cfg.out_dir) / "bench_eval.json")
    if out["failed"]:
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "train":
        sys.argv.pop(1)
        train_main()
    elif len(sys.argv) > 1 and sys.argv[1] == "eval":
        sys.argv.pop(1)
        eval_main()
    else:
        main()
