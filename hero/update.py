"""One micro-batch's forward and loss, and two cheaper ways to compute the same thing (issue 37).

``fit`` (``hero.training``) calls ``micro_batch_loss``. With both options off it is the plain HF
path, unchanged: right-padded batch, logits at every position, ``out.loss``. The options compute
the same loss and the same routing decisions, up to float summation order:

``labelled_logits``  the LM head and the cross-entropy run only at the positions whose next token
                     is labelled (the response tokens under ``assistant_only_loss``); the decoder's
                     last hidden state at the other positions is never projected onto the vocabulary.
``pad_waste``        the micro-batch's samples are sorted by length and cut greedily into
                     sub-batches whose padded positions are at most this share of the sub-batch
                     (1.0: one sub-batch, today's path). The same samples make the update: the LM
                     loss is Σ CE over all sub-batches / number of labelled targets of the whole
                     micro-batch (HF's token mean), and the gates of the sub-batches are put back
                     into (B, T) tensors of the original order, so the regularizer and the skip
                     meter see exactly what one padded forward gives them.

Nothing below the first routable layer trains for a routed method, and autograd already does not
record it (no input of those layers requires grad: ``tests/test_update.py`` checks it), so no
``no_grad`` is needed to keep its activations out of memory. Its *compute* is saved only by not
running it: ``prefix_cache`` (``cached_prefix_states``) computes the hidden states entering the first
routable layer k once per sample (unpadded, under the run's autocast) and keeps them on disk per
(prefix weights, samples' tokens, k, precision), and ``micro_batch_loss(prefix=...)`` runs layers k…
on them (``layers_from``). One run sees each sample once, so the cache pays from the second run on
the same data (seeds, variants, α values, calibration trials).

Stochastic training rules (SkipGPT-RT's Gumbel noise, random_skip's draws) draw their noise per
token of the tensors they see: sub-batches (``pad_waste < 1``) lay the tokens out differently, so
their draws differ (same distribution); HeRo's routing is deterministic and unaffected.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from hero.data import collate
from hero.model import last_records
from hero.model.block import BlockRecord
from hero.model.prefix import causal_lm_parts, layers_from, prefix_weights_digest
from hero.objectives import prediction_positions, skip_loss
from hero.once import built_once

IGNORE = -100


def length_groups(lengths: Sequence[int], pad_waste: float) -> list[list[int]]:
    """Indices into ``lengths``, cut into sub-batches whose padding share is ≤ ``pad_waste``.

    Longest first; a sample joins the current group while the group's padded positions
    (Σ (max − n_i)) stay at most ``pad_waste`` of its B·max positions. ``pad_waste ≥ 1``
    gives one group in the original order.
    """
    if pad_waste >= 1.0 or len(lengths) <= 1:
        return [list(range(len(lengths)))]
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for i in order:
        if groups:
            group = groups[-1]
            longest = lengths[group[0]]
            real = sum(lengths[k] for k in group) + lengths[i]
            if 1.0 - real / (longest * (len(group) + 1)) <= pad_waste:
                group.append(i)
                continue
        groups.append([i])
    return groups


class _Stop(Exception):
    pass


@torch.no_grad()
def prefix_states(model: nn.Module, items: Sequence[dict], first: int) -> list[torch.Tensor]:
    """Per sample (unpadded, one at a time), the (T_i, d) hidden state entering decoder layer ``first``."""
    decoder, _ = causal_lm_parts(model)
    captured: list[torch.Tensor] = []

    def grab(module, args, kwargs):
        captured.append((args[0] if args else kwargs["hidden_states"])[0].detach().clone())
        raise _Stop

    handle = decoder.layers[first].register_forward_pre_hook(grab, with_kwargs=True)
    device = next(model.parameters()).device
    try:
        for item in items:
            ids = torch.tensor([item["input_ids"]], device=device)
            try:
                decoder(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
            except _Stop:
                pass
    finally:
        handle.remove()
    return captured


def _inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    key = "inputs_embeds" if "inputs_embeds" in batch else "input_ids"
    return {key: batch[key], "attention_mask": batch["attention_mask"]}


def labelled_ce_sum(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(Σ cross-entropy over labelled next-token targets, their count); logits only where labelled.

    Position t predicts token t+1 (HF's shift); the LM head runs on the (N_labelled, d) rows only.
    """
    decoder, head = causal_lm_parts(model)
    hidden = decoder(**_inputs(batch), use_cache=False)
    hidden = hidden.last_hidden_state
    targets = batch["labels"][:, 1:]
    where = targets != IGNORE
    logits = head(hidden[:, :-1][where]).float()
    return F.cross_entropy(logits, targets[where], reduction="sum"), int(where.sum())


def full_ce_sum(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(Σ cross-entropy over labelled targets, their count) from logits at every position."""
    out = model(**_inputs(batch), use_cache=False)
    logits = out.logits[:, :-1].float()
    targets = batch["labels"][:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")
    return loss, int((targets != IGNORE).sum())


def _scatter_records(parts: list[tuple[list[int], list[BlockRecord]]], shape: tuple[int, int]) -> list[BlockRecord]:
    """Each layer's (b_i, t_i) gates and executed masks of the sub-batches, back in one (B, T) tensor.

    Positions beyond a sample's length (its padding) hold gate 0 and executed False; every consumer
    masks them out (regularizers by ``valid``, ``SkipMeter`` by the attention mask).
    """
    first = parts[0][1]
    out = []
    for layer_index, reference in enumerate(first):
        gate = reference.gate.new_zeros(shape)
        executed = torch.zeros(shape, dtype=torch.bool, device=reference.ffn_executed.device)
        for rows, records in parts:
            rec = records[layer_index]
            index = torch.tensor(rows, device=gate.device)
            width = rec.gate.shape[1]
            gate = gate.index_copy(0, index, F.pad(rec.gate, (0, shape[1] - width)))
            executed[index, :width] = rec.ffn_executed
        out.append(BlockRecord(reference.layer, gate, executed))
    return out


def micro_batch_loss(
    model: nn.Module,
    items: list[dict],
    pad_id: int,
    device: torch.device,
    alpha: float,
    routed: bool,
    regularizer: Callable | None,
    labelled_logits: bool = False,
    pad_waste: float = 1.0,
    prefix: tuple[int, Sequence[torch.Tensor]] | None = None,
    skip_loss_on_labels: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[BlockRecord] | None, torch.Tensor]:
    """(loss, lm_loss, l_skip, records, attention_mask) of one micro-batch; call under autocast.

    ``records`` and ``attention_mask`` are (B, T) in the order of ``items`` (None records when not
    routed). With both options off this is exactly the plain path: one padded forward, ``out.loss``.
    ``prefix``: (k, per-item hidden states entering layer k from ``prefix_states``): layers below k
    are not run. ``skip_loss_on_labels`` (``trainer.skip_loss_positions=lm``): the skip loss covers only
    the positions the LM loss covers.
    """
    full = collate(items, pad_id)
    full = {k: v.to(device) for k, v in full.items()}
    if not labelled_logits and pad_waste >= 1.0 and prefix is None:
        out = model(**full, use_cache=False)
        lm_loss = out.loss.float()
        records = last_records(model) if routed else None
    else:
        groups = length_groups([len(item["input_ids"]) for item in items], pad_waste)
        ce_sum = torch.zeros((), device=device)
        count = 0
        parts = []
        for rows in groups:
            batch = collate([items[i] for i in rows], pad_id)
            batch = {k: v.to(device) for k, v in batch.items()}
            ce = labelled_ce_sum if labelled_logits else full_ce_sum
            if prefix is None:
                part_sum, part_count = ce(model, batch)
            else:
                first, states = prefix
                width = batch["input_ids"].shape[1]
                embeds = [F.pad(states[i], (0, 0, 0, width - states[i].shape[0])) for i in rows]
                batch["inputs_embeds"] = torch.stack(embeds).to(device)
                with layers_from(model, first):
                    part_sum, part_count = ce(model, batch)
            ce_sum = ce_sum + part_sum
            count += part_count
            if routed:
                parts.append((rows, list(last_records(model))))
        # HF's mean over labelled targets; nan when there are none, as F.cross_entropy(reduction="mean") gives.
        lm_loss = ce_sum / count if count else ce_sum * float("nan")
        records = _scatter_records(parts, tuple(full["input_ids"].shape)) if routed else None
    if routed:
        labels = full["labels"] if skip_loss_on_labels else None  # trainer.skip_loss_positions=lm
        l_skip = (regularizer or skip_loss)(
            [r.gate for r in records], prediction_positions(full["attention_mask"], labels)
        )
    else:
        l_skip = torch.zeros((), device=device)
    return lm_loss + alpha * l_skip, lm_loss, l_skip, records, full["attention_mask"]


def prefix_key(model: nn.Module, items: Sequence[dict], first: int, precision: str) -> str:
    """Hash of what the cached states depend on: the prefix's weights, every sample's tokens, k, the precision."""
    digest = prefix_weights_digest(model, first, f"{first}:{precision}:{torch.__version__}")
    for item in items:
        digest.update(torch.tensor(item["input_ids"], dtype=torch.int64).numpy().tobytes())
    return digest.hexdigest()[:16]


def cached_prefix_states(
    model: nn.Module, items: Sequence[dict], first: int, directory, precision: str, autocast
) -> list[torch.Tensor]:
    """``prefix_states`` of every sample, read from ``<directory>/<prefix_key>/states.pt`` or computed there once.

    The states are computed under the training's autocast (``autocast``: a context factory), so a
    bf16 run caches bf16-autocast states. ``hero.once.built_once`` builds the file: jobs started
    together on the same data wait for the first one's states instead of computing their own
    (on the ten-times SmolLM2 data, about 2 GB and half an hour at 1 thread).
    """
    path = Path(directory) / prefix_key(model, items, first, precision)
    computed = []

    def build(tmp: Path) -> None:
        was_training = model.training
        model.eval()
        try:
            with autocast():
                computed.extend(prefix_states(model, items, first))
        finally:
            model.train(was_training)
        torch.save([s.cpu() for s in computed], tmp / "states.pt")

    built_once(path, "states.pt", build, f"the states entering layer {first} of {len(items)} samples", "prefix")
    if computed:
        return computed
    return torch.load(path / "states.pt", map_location=next(model.parameters()).device, weights_only=True)
