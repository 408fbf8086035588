"""Weights & Biases for one run: offline by default, grouped per variant, always finished.

Seeds of one variant share a ``group``; the variant is the ``job_type``; tags carry
the ablation, α, memory dim and layer set. The run id derives from the config hash,
so a requeued or resumed job continues the same W&B run instead of starting another.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hero.errors import ConfigError

MODES = ("offline", "online", "disabled")


class Tracker:
    """A thin handle on an active W&B run (or nothing, for ``logger=none``)."""

    def __init__(self, run=None):
        self.run = run

    def log(self, metrics: dict, step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)

    def log_routing(self, skip: dict, rho: dict, step: int | None = None) -> None:
        """Per-layer FFN usage and the per-token skip distribution as W&B histograms and scalars."""
        if self.run is None:
            return
        import wandb

        payload = {
            f"routing/ffn_rate/layer_{layer}": rate for layer, rate in skip.get("per_layer_ffn_rate", {}).items()
        }
        payload.update(
            {f"routing/mean_gate/layer_{layer}": g for layer, g in skip.get("per_layer_mean_gate", {}).items()}
        )
        payload.update({f"routing/rho/layer_{layer}": value for layer, value in rho.items()})
        payload["routing/param_skip"] = skip.get("param_rate")
        histogram = skip.get("per_token", {}).get("histogram")
        if histogram and sum(histogram["counts"]):
            payload["routing/per_token_skip"] = wandb.Histogram(np_histogram=(histogram["counts"], histogram["edges"]))
        self.run.log(payload, step=step)

    def summary(self, values: dict) -> None:
        if self.run is not None:
            self.run.summary.update(values)

    @property
    def info(self) -> dict | None:
        if self.run is None:
            return None
        return {"run_id": self.run.id, "mode": self.run.settings.mode, "dir": self.run.dir, "group": self.run.group}


def group_name(cfg) -> str:
    """Seeds of one variant share this group."""
    return f"{cfg.model.name}-{cfg.method.name}-{cfg.variant}-a{cfg.alpha}-m{cfg.router.memory_dim}-{cfg.layers.name}"


def tags(cfg) -> list[str]:
    return [
        f"ablation:{cfg.variant}",
        f"alpha:{cfg.alpha}",
        f"memory_dim:{cfg.router.memory_dim}",
        f"layers:{cfg.layers.name}",
        f"method:{cfg.method.name}",
        f"backbone:{cfg.model.name}",
    ]


def check_config(logger_cfg) -> None:
    if logger_cfg.name not in ("wandb", "none"):
        raise ConfigError(f"logger={logger_cfg.name!r}: allowed values are wandb, none")
    if logger_cfg.name == "wandb" and logger_cfg.mode not in MODES:
        raise ConfigError(f"logger.mode={logger_cfg.mode!r}: allowed values are {', '.join(MODES)}")


@contextmanager
def tracked_run(cfg, resolved: dict, run_dir: str, run_id: str, enabled: bool = True) -> Iterator[Tracker]:
    """Start (or resume) the W&B run; ``finish`` runs on every exit, with exit code 1 on failure."""
    if cfg.logger.name == "none" or not enabled:
        yield Tracker()
        return
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    run = wandb.init(
        project=cfg.logger.project,
        entity=cfg.logger.entity,
        mode=cfg.logger.mode,
        dir=run_dir,
        id=run_id,
        resume="allow",
        group=group_name(cfg),
        job_type=cfg.variant,
        tags=tags(cfg),
        config=resolved,
        name=f"{cfg.variant}-s{cfg.seed}",
    )
    try:
        yield Tracker(run)
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()


def wandb_run_id(run_dir: str | os.PathLike) -> str:
    """The W&B run id of the run in ``run_dir``: created once (``<run_dir>/.wandb_run_id``) and read
    back by a requeued or relaunched job, so ``wandb.init(id=..., resume="allow")`` continues the
    same run instead of starting a duplicate. ``tracked_run`` uses the config hash instead; this is for
    task functions launched through the HeRo launcher that have no config hash."""
    path = Path(run_dir) / ".wandb_run_id"
    if path.exists():
        rid = path.read_text().strip()
        if rid:
            return rid
    path.parent.mkdir(parents=True, exist_ok=True)
    rid = secrets.token_hex(4)
    tmp = path.with_name(f".wandb_run_id.{os.getpid()}")
    tmp.write_text(rid + "\n")
    try:
        os.link(tmp, path)  # atomic create-if-absent: a concurrent rank/requeue keeps the first id
    except FileExistsError:
        rid = path.read_text().strip() or rid
    except OSError:
        if not path.exists():
            os.replace(tmp, path)
        rid = path.read_text().strip() or rid
    finally:
        tmp.unlink(missing_ok=True)
    return rid
