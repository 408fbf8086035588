"""The training loop: AdamW on the trainable tensors only, loss = L_LM + α·L_skip (eq 17).

Plain PyTorch: seeded data order, gradient accumulation to the global batch,
linear warm-up, grad-clip, optional bf16 autocast (fp16 is refused: no loss scaling) and gradient checkpointing,
periodic checkpoints (trainable tensors + optimizer + scheduler + RNG + data
position) and exact resume from the latest one. Under ``torch.distributed`` each
rank takes its share of every global batch and the gradients of the trainable
tensors are averaged across ranks (``hero.distributed``); rank 0 writes checkpoints.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from hero.checkpoints import load_latest, rng_state, save_checkpoint
from hero.data import SFTDataset
from hero.distributed import all_mean, allreduce_gradients, world
from hero.errors import ConfigError
from hero.model.prefix import frozen_prefix_end
from hero.objectives import SkipMeter
from hero.preemption import preemption_deferred, register_checkpoint_fn
from hero.update import cached_prefix_states, micro_batch_loss

PRECISIONS = ("fp32", "bf16")
# fp16 is refused: the loop has no loss scaling (torch.amp.GradScaler, and its state in the checkpoints), without
# which fp16's 5-bit exponent flushes small gradients to zero; bf16 keeps fp32's exponent range.
FP16_REFUSAL = (
    "trainer.precision='fp16': the training loop has no loss scaling (GradScaler), so fp16 gradients can "
    "underflow to zero; allowed values are fp32, bf16 (mixed precision with fp32's exponent range)"
)
SCHEDULES = ("linear", "cosine", "constant")
# Where the skip loss (eq 18) averages: every valid prediction position (the paper), or only where the LM loss is
# (labels ≠ −100: with data.assistant_only_loss=true, the assistant tokens).
SKIP_LOSS_POSITIONS = ("all", "lm")


class TrainingConfigError(ConfigError):
    """A trainer option has a value the loop cannot run with."""


@dataclass
class TrainSummary:
    steps: int
    tokens: int
    final_loss: float
    final_lm_loss: float
    final_skip_loss: float
    train_param_skip: float  # realized parameter skip rate of the last update's batch
    history: list[dict] = field(default_factory=list)  # every update's metrics, kept across resumes
    log_every: int = 10

    def as_record(self) -> dict:
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "final_loss": self.final_loss,
            "final_lm_loss": self.final_lm_loss,
            "final_skip_loss": self.final_skip_loss,
            "train_param_skip": self.train_param_skip,
            "trajectory": trajectory(self.history, self.log_every),
        }


TRAJECTORY_FIELDS = ("loss", "lm_loss", "skip_loss", "param_skip")


def trajectory(history: list[dict], every: int) -> list[dict]:
    """The training curve a record keeps: each of ``TRAJECTORY_FIELDS`` averaged over the updates of a window.

    Windows are updates ``(w·every, (w+1)·every]`` (``trainer.log_every``), each row keyed by the last update it
    holds; ``param_skip`` is the batch's parameter skip rate over its non-padding tokens (``SkipMeter``). A run
    resumed from a checkpoint written before checkpoints carried the history starts its rows at the resume.
    """
    windows: dict[int, list[dict]] = {}
    for metrics in history:
        windows.setdefault((metrics["step"] - 1) // every, []).append(metrics)
    return [
        {"step": rows[-1]["step"], **{k: sum(r[k] for r in rows) / len(rows) for k in TRAJECTORY_FIELDS}}
        for rows in windows.values()
    ]


def check_config(tcfg) -> None:
    """Validate trainer options before any compute."""
    for name in ("global_batch", "micro_batch", "checkpoint_every", "keep_checkpoints", "log_every"):
        value = tcfg[name]
        if not isinstance(value, int) or value <= 0:
            raise TrainingConfigError(f"trainer.{name}={value!r}: must be a positive integer")
    if tcfg.max_steps is not None and (not isinstance(tcfg.max_steps, int) or tcfg.max_steps <= 0):
        raise TrainingConfigError(f"trainer.max_steps={tcfg.max_steps!r}: must be a positive integer or null")
    if tcfg.global_batch % tcfg.micro_batch:
        raise TrainingConfigError(
            f"trainer.global_batch={tcfg.global_batch} is not a multiple of trainer.micro_batch={tcfg.micro_batch}"
        )
    if not tcfg.lr > 0:
        raise TrainingConfigError(f"trainer.lr={tcfg.lr!r}: must be positive")
    if not 0 <= tcfg.warmup_frac < 1:
        raise TrainingConfigError(f"trainer.warmup_frac={tcfg.warmup_frac!r}: must lie in [0, 1)")
    if tcfg.precision == "fp16":
        raise TrainingConfigError(FP16_REFUSAL)
    if tcfg.precision not in PRECISIONS:
        raise TrainingConfigError(f"trainer.precision={tcfg.precision!r}: allowed values are {', '.join(PRECISIONS)}")
    if not isinstance(tcfg.get("labelled_logits", False), bool):
        raise TrainingConfigError(f"trainer.labelled_logits={tcfg.get('labelled_logits')!r}: must be true or false")
    if not isinstance(tcfg.get("prefix_cache", False), bool):
        raise TrainingConfigError(f"trainer.prefix_cache={tcfg.get('prefix_cache')!r}: must be true or false")
    pad_waste = tcfg.get("pad_waste", 1.0)
    if isinstance(pad_waste, bool) or not isinstance(pad_waste, int | float) or not 0 <= pad_waste <= 1:
        raise TrainingConfigError(f"trainer.pad_waste={pad_waste!r}: must be a number in [0, 1] (1 = no bucketing)")
    if tcfg.schedule not in SCHEDULES:
        raise TrainingConfigError(f"trainer.schedule={tcfg.schedule!r}: allowed values are {', '.join(SCHEDULES)}")
    warmup = tcfg.get("alpha_warmup_frac", 0.0)
    if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or not 0 <= warmup <= 1:
        raise TrainingConfigError(f"trainer.alpha_warmup_frac={warmup!r}: must lie in [0, 1]")
    positions = tcfg.get("skip_loss_positions", "all")
    if positions not in SKIP_LOSS_POSITIONS:
        raise TrainingConfigError(
            f"trainer.skip_loss_positions={positions!r}: allowed values are {', '.join(SKIP_LOSS_POSITIONS)}"
        )


def total_updates(tcfg, num_samples: int) -> int:
    if tcfg.max_steps:
        return int(tcfg.max_steps)
    return max(1, math.ceil(num_samples * tcfg.epochs / tcfg.global_batch))


def lr_lambda(total: int, warmup_frac: float, schedule: str) -> Callable[[int], float]:
    """Linear warm-up over the first ``warmup_frac`` of updates (HERO_SPEC §6), then the schedule."""
    warmup = math.ceil(warmup_frac * total)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total - warmup)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return max(0.0, 1.0 - progress)

    return factor


def alpha_schedule(total: int, warmup_frac: float) -> Callable[[int], float]:
    """α_t / α at update ``step`` (0-based): a linear ramp (step + 1)/W over the first W = ⌈warmup_frac · total⌉
    updates, then 1 (eq 17 with α_t; ``warmup_frac`` 0: α from the first update, the paper's rule)."""
    warmup = math.ceil(warmup_frac * total)
    return lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0


def sample_order(num_samples: int, updates: int, global_batch: int, seed: int) -> list[int]:
    """The seeded sequence of sample indices for the whole run (one permutation per epoch)."""
    needed = updates * global_batch
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []
    while len(order) < needed:
        order.extend(torch.randperm(num_samples, generator=gen).tolist())
    return order[:needed]


def autocast_context(precision: str, device: torch.device):
    if precision == "fp32":
        return torch.autocast(device_type=device.type, enabled=False)
    return torch.autocast(device_type=device.type, dtype={"bf16": torch.bfloat16}[precision])


def fit(
    model: nn.Module,
    dataset: SFTDataset,
    tcfg,
    alpha: float,
    seed: int,
    checkpoint_dir: str | Path,
    on_log: Callable[[dict], None] | None = None,
    routed: bool = True,
    regularizer: Callable | None = None,
) -> TrainSummary:
    """Train the trainable tensors of ``model``; resumes from ``checkpoint_dir`` if it holds a checkpoint.

    The loss is L_LM + alpha · regularizer(gates, valid) for a routed model; the regularizer is
    HeRo's L_skip (eq 18) unless another is given (a Table 1 method's objective, ``hero.methods``). Beyond the paper:
    ``trainer.alpha_warmup_frac`` ramps alpha linearly (``alpha_schedule``), ``trainer.skip_loss_positions=lm``
    averages the regularizer only over the positions the LM loss covers.
    """
    rank, world_size = world()
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if not params:
        raise TrainingConfigError("the model has no trainable parameters")
    per_rank = tcfg.global_batch // world_size
    if tcfg.global_batch % (world_size * tcfg.micro_batch):
        raise TrainingConfigError(
            f"trainer.global_batch={tcfg.global_batch} is not divisible by "
            f"world size {world_size} × trainer.micro_batch={tcfg.micro_batch}"
        )
    accum = per_rank // tcfg.micro_batch
    updates = total_updates(tcfg, len(dataset))
    alpha_factor = alpha_schedule(updates, float(tcfg.get("alpha_warmup_frac", 0.0)))
    lm_positions = tcfg.get("skip_loss_positions", "all") == "lm"
    order = sample_order(len(dataset), updates, tcfg.global_batch, seed)
    optimizer = torch.optim.AdamW(params, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(updates, tcfg.warmup_frac, tcfg.schedule))
    if tcfg.gradient_checkpointing:
        model.activation_checkpointing_enable()
    checkpoint_dir = Path(checkpoint_dir)
    start_step, tokens, history = load_latest(checkpoint_dir, named, optimizer, scheduler)
    pad_id = dataset.tokenizer.pad_token_id
    labelled_logits, pad_waste = bool(tcfg.get("labelled_logits", False)), float(tcfg.get("pad_waste", 1.0))
    prefix_cache = _prefix_cache(model, dataset, tcfg, device) if tcfg.get("prefix_cache", False) else None
    model.train()
    last = {"loss": float("nan"), "lm_loss": float("nan"), "skip_loss": 0.0, "param_skip": 0.0}
    step_meter = SkipMeter(model) if routed else None
    scheduled = [m for m in model.modules() if hasattr(m, "set_progress")]  # e.g. SkipGPT-RT's annealed T
    # the last completed update, as the preemption hook saves it: its step, tokens and the RNG state the next update
    # starts from (a preemption mid-update finds the RNG advanced by that update's draws)
    completed = {"step": start_step, "tokens": tokens, "rng": rng_state()}
    unregister = (
        _save_on_preemption(checkpoint_dir, completed, history, named, optimizer, scheduler, tcfg)
        if rank == 0
        else None
    )
    bar = tqdm(
        range(start_step, updates),
        initial=start_step,
        total=updates,
        disable=not tcfg.progress or rank != 0,
        desc="train",
        dynamic_ncols=True,
    )
    for step in bar:
        completed["rng"] = rng_state()  # as a periodic checkpoint saves it: after the last update's logging
        batch_start = step * tcfg.global_batch + rank * per_rank
        sums = {"loss": 0.0, "lm_loss": 0.0, "skip_loss": 0.0}
        if routed:
            step_meter.reset()
        for module in scheduled:
            module.set_progress(step / updates)
        step_tokens = 0
        for micro in range(accum):
            lo = batch_start + micro * tcfg.micro_batch
            indices = order[lo : lo + tcfg.micro_batch]
            items = [dataset[i] for i in indices]
            prefix = (prefix_cache[0], [prefix_cache[1][i] for i in indices]) if prefix_cache else None
            with autocast_context(tcfg.precision, device):
                loss, lm_loss, l_skip, records, attention_mask = micro_batch_loss(
                    model,
                    items,
                    pad_id,
                    device,
                    alpha * alpha_factor(step),
                    routed,
                    regularizer,
                    labelled_logits,
                    pad_waste,
                    prefix,
                    skip_loss_on_labels=lm_positions,
                )
            (loss / accum).backward()
            if routed:
                step_meter.update(records, attention_mask)
            step_tokens += int(attention_mask.sum())
            for key, value in (("loss", loss), ("lm_loss", lm_loss), ("skip_loss", l_skip)):
                sums[key] += float(value.detach()) / accum
        if world_size > 1:
            allreduce_gradients(params, average=True)
            sums = {k: all_mean(v, device) for k, v in sums.items()}
            step_tokens = round(all_mean(step_tokens, device) * world_size)
        tokens += step_tokens
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, tcfg.grad_clip))
        with preemption_deferred():  # the save hook sees update `step` wholly done or not begun
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            metrics = {
                "step": step + 1,
                **sums,
                "param_skip": step_meter.param_rate if routed else 0.0,
                "grad_norm": grad_norm,
                "lr": scheduler.get_last_lr()[0],
            }
            last = metrics
            history.append(metrics)
            completed.update(step=step + 1, tokens=tokens, rng=rng_state())
        bar.set_postfix(
            loss=f"{sums['loss']:.3f}",
            lm=f"{sums['lm_loss']:.3f}",
            skip=f"{sums['skip_loss']:.2f}",
            **({"p_skip": f"{metrics['param_skip']:.1%}"} if routed else {}),
        )
        if on_log and rank == 0 and ((step + 1) % tcfg.log_every == 0 or step + 1 == updates):
            on_log(metrics)
        if (step + 1) % tcfg.checkpoint_every == 0 and step + 1 < updates and rank == 0:
            save_checkpoint(
                checkpoint_dir, step + 1, tokens, named, optimizer, scheduler, tcfg.keep_checkpoints, history
            )
    if unregister is not None:
        unregister()
    model.eval()
    return TrainSummary(
        steps=updates,
        tokens=tokens,
        final_loss=last["loss"],
        final_lm_loss=last["lm_loss"],
        final_skip_loss=last["skip_loss"],
        train_param_skip=last["param_skip"],
        history=history,
        log_every=tcfg.log_every,
    )


def _prefix_cache(model: nn.Module, dataset: SFTDataset, tcfg, device: torch.device):
    """(k, per-sample hidden states entering the first routable layer k), cached on disk (``trainer.prefix_cache``)."""
    try:
        first = frozen_prefix_end(model)
    except ValueError as err:
        raise TrainingConfigError(f"trainer.prefix_cache=true needs a frozen prefix: {err}") from None
    items = [dataset[i] for i in range(len(dataset))]
    states = cached_prefix_states(
        model,
        items,
        first,
        tcfg.get("prefix_cache_dir") or "prefix_cache",
        tcfg.precision,
        lambda: autocast_context(tcfg.precision, device),
    )
    return first, states


def _save_on_preemption(directory: Path, completed: dict, history: list[dict], named, optimizer, scheduler, tcfg):
    """Under the SLURM launcher, save the last completed update when the job is preempted or times out.

    submitit calls the hook from its USR2 handler, then requeues; the requeued job resumes
    here instead of at the last periodic checkpoint. The handler may run anywhere in an update:
    parameters, optimizer and scheduler move only in the update's last statements, which ``fit``
    runs under ``preemption_deferred`` together with ``completed``'s step, so they are those of
    ``completed``; the RNG state is the one saved in ``completed`` when that update ended, since
    the current one has already drawn the noise of the interrupted update's micro-batches.
    """
    return register_checkpoint_fn(
        lambda: save_checkpoint(
            directory,
            completed["step"],
            completed["tokens"],
            named,
            optimizer,
            scheduler,
            tcfg.keep_checkpoints,
            [m for m in history if m["step"] <= completed["step"]],
            rng=completed["rng"],
        )
    )


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's global RNGs from the run's seed (before a method is attached)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def set_threads(tcfg) -> None:
    """The run's ``trainer.num_threads`` (null: torch's default, every core), for training and for any later
    scoring of the run (``hero.rescore``), so that their seconds compare."""
    if tcfg.num_threads:
        torch.set_num_threads(int(tcfg.num_threads))
