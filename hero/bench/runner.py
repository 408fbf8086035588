"""Dense vs HeRo-routed wall-clock benchmark (issue 5): prefill, KV-cached decode, peak memory.

Both models share the same frozen backbone weights and run in one process,
interleaved (``hero.bench.timing.interleaved``). The routed model either loads a
trained router (a directory written by ``hero.save_router``) or runs a forced
routing policy (``ForcedSkip``) that skips the FFN for a given fraction of tokens at
every routable block, so any backbone shape can be measured. Each figure comes
with the realized skip of the measured tokens and two ideal speedups: the FLOP
model's (``hero.model.flops``, compute-bound) and the bytes-moved model's
(``hero.bench.traffic``, memory-bound: a weight matrix is read once if any row uses
it). Each shape is held to the lower of the two, the ideal that applies; measured /
ideal says how much of that saving the implementation turns into wall-clock time.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field

import torch
from torch import nn

import hero
from hero.bench import traffic
from hero.bench.timing import interleaved, peak_memory, summary, synchronize
from hero.model import flops
from hero.model.attach import routed_blocks

GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


class ForcedSkip:
    """Routing policy ``(j, gate) -> executed``: the FFN is skipped for a fraction ``skip`` of tokens at every block.

    Token k (counted per block j across calls) is skipped iff frac(o_j + k·φ) < skip,
    a Weyl sequence with the golden ratio φ and a per-block offset o_j: any run of n
    consecutive tokens skips n·skip ± 1 of them, also one token at a time (decode),
    and different blocks skip different tokens. Deterministic given ``seed``;
    ``reset()`` restarts the counters. Each call slices a per-block table of the
    sequence (grown by doubling), so the policy costs the timed step one view, not
    the handful of element-wise ops a trained router's ``g ≥ τ`` replaces.
    """

    def __init__(self, skip: float, seed: int = 0):
        if not 0.0 <= skip <= 1.0:
            raise ValueError(f"ffn_skip={skip!r}: must lie in [0, 1]")
        self.skip = float(skip)
        self.seed = seed
        self.tables: dict[int, torch.Tensor] = {}
        self.reset()

    def reset(self) -> None:
        self.counter: dict[int, int] = {}

    def offset(self, j: int) -> float:
        return (0.7548776662466927 * j + 0.5698402909980532 * self.seed) % 1.0

    def __call__(self, j: int, gate: torch.Tensor) -> torch.Tensor:
        n = gate.shape[0]
        start = self.counter.get(j, 0)
        self.counter[j] = start + n
        table = self.tables.get(j)
        if table is None or table.numel() < start + n or table.device != gate.device:
            k = torch.arange(max(4096, 2 * (start + n)), dtype=torch.float64, device=gate.device)
            table = self.tables[j] = torch.frac(self.offset(j) + k * GOLDEN) >= self.skip
        return table[start : start + n]


@dataclass
class SkipCount:
    """Realized routing of the measured tokens: skipped (token, block) pairs per routable block.

    Per forward pass it also counts the routable blocks in which at least one row executed
    the FFN (``ffn_blocks``) and at least one row took the adapter (``adapter_blocks``):
    the weights those blocks had to read (``hero.bench.traffic``).
    """

    layers: list[int]
    ffn_params: int
    total_params: int
    tokens: int = 0
    passes: int = 0
    ffn_blocks: int = 0
    adapter_blocks: int = 0
    skipped: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.skipped = [0] * len(self.layers)

    def add(self, model: nn.Module) -> None:
        records = hero.last_records(model)
        tokens = records[0].ffn_executed.numel()
        self.tokens += tokens
        self.passes += 1
        for i, record in enumerate(records):
            skipped = int((~record.ffn_executed).sum())
            self.skipped[i] += skipped
            self.ffn_blocks += skipped < tokens
            self.adapter_blocks += skipped > 0

    @property
    def ffn_skip(self) -> float:
        """Fraction of (token, routable block) pairs that took the adapter."""
        return sum(self.skipped) / max(1, self.tokens * len(self.layers))

    @property
    def param_rate(self) -> float:
        """HERO_SPEC §7 parameter skip rate: bypassed FFN parameters / total backbone parameters, mean over tokens."""
        return sum(self.skipped) * self.ffn_params / max(1, self.tokens) / self.total_params

    def result(self) -> dict:
        n = max(1, self.tokens)
        passes = max(1, self.passes)
        return {
            "param_rate": self.param_rate,
            "ffn_skip": self.ffn_skip,
            "tokens": self.tokens,
            "per_layer_ffn_rate": {str(layer): 1.0 - s / n for layer, s in zip(self.layers, self.skipped)},
            "ffn_blocks_per_pass": self.ffn_blocks / passes,
            "adapter_blocks_per_pass": self.adapter_blocks / passes,
        }


def random_llama(
    hidden: int,
    layers: int,
    intermediate: int,
    heads: int,
    kv_heads: int,
    vocab: int,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    max_positions: int = 8192,
) -> nn.Module:
    """A randomly initialised Llama of the given shape, built directly on ``device`` in ``dtype``.

    Speed does not depend on the weights: N(0, 0.02) matrices and unit norm weights
    (transformers' own init is slow at Llama-3.1-8B scale on a CPU).
    """
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to_empty(device=device).to(dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    model.model.rotary_emb = LlamaRotaryEmbedding(config=config).to(device)  # the meta device left inv_freq empty
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def routed_twin(dense: nn.Module, layers, checkpoint: str | None = None) -> nn.Module:
    """A routed copy of ``dense`` that SHARES its backbone weights (one backbone in memory).

    The module tree is deep-copied with every parameter mapped to itself, then HeRo is
    attached (or a saved router loaded). Adapters take the backbone's dtype (bf16/fp16
    on accelerators); the router stays fp32, as ``Router.step`` computes in fp32.
    """
    reference = next(dense.parameters())
    routed = copy.deepcopy(dense, memo={id(p): p for p in dense.parameters()})
    routed = hero.load_router(routed, checkpoint) if checkpoint else hero.attach(routed, layers)
    routed.hero_router.to(device=reference.device, dtype=torch.float32)
    for block in routed_blocks(routed):
        block.adapter.to(device=reference.device, dtype=reference.dtype)
        block.eta.data = block.eta.data.to(device=reference.device, dtype=torch.float32)
    return routed.eval()


class Bench:
    """A dense backbone and its routed copy, with the FLOP model of both."""

    def __init__(
        self, dense: nn.Module, routed: nn.Module, policy: ForcedSkip | None, device: torch.device, clock: str = "wall"
    ):
        self.dense, self.routed, self.policy, self.device, self.clock = dense, routed, policy, device, clock
        self.shape = flops.Shape.from_config(dense.config)
        self.router_config = routed.hero_config
        blocks = routed_blocks(routed)
        self.adapter_dim = blocks[0].adapter.W1.out_features
        self.layers = [b.layer for b in blocks]
        from hero.objectives import total_param_count

        self.ffn_params = sum(p.numel() for p in blocks[0].base_layer.mlp.parameters())
        self.total_params = total_param_count(routed)
        self.router_params = sum(p.numel() for p in routed.hero_router.parameters())
        self.elem = next(dense.parameters()).element_size()
        self.adapter_elem = blocks[0].adapter.W1.weight.element_size()
        c = self.router_config
        self.memory_dim = c.carried_memory_dim

    def counter(self) -> SkipCount:
        return SkipCount(self.layers, self.ffn_params, self.total_params)

    def _routing(self):
        if self.policy is None:
            from contextlib import nullcontext

            return nullcontext()
        self.policy.reset()
        return hero.forced_routing(self.routed, self.policy)

    def _flops(self, skip: SkipCount, runs: int, tokens: int, context: int, logits: int) -> dict:
        """FLOPs of one measured run, with the realized skipped pairs averaged over ``runs`` counted runs."""
        skipped = [s / runs for s in skip.skipped]
        return flops.breakdown(self.shape, self.router_config, self.adapter_dim, tokens, context, logits, skipped)

    def _bytes(self, skip: SkipCount, tokens: int, kv_read: float, logits: int) -> dict:
        """Bytes moved by one forward pass (averaged over the counted passes: ``tokens``, ``kv_read`` per pass)."""
        passes = max(1, skip.passes)
        return traffic.breakdown(
            self.shape,
            tokens,
            kv_read,
            logits,
            self.elem,
            num_routable=len(self.layers),
            ffn_blocks=skip.ffn_blocks / passes,
            adapter_blocks=skip.adapter_blocks / passes,
            adapter_dim=self.adapter_dim,
            adapter_elem=self.adapter_elem,
            router_params=self.router_params,
            memory_dim=self.memory_dim,
        )

    # -- prefill ---------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, batch: int, seq: int, repeats: int, warmup: int, seed: int = 0) -> dict:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, self.shape.vocab, (batch, seq), generator=gen).to(self.device)

        def run(model):
            return lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1)

        with self._routing():
            times = interleaved(
                {"dense": run(self.dense), "routed": run(self.routed)}, self.device, repeats, warmup, clock=self.clock
            )
            if self.policy is not None:
                self.policy.reset()
            skip = self.counter()
            mem = {}
            for name, model in (("dense", self.dense), ("routed", self.routed)):
                with peak_memory(self.device) as mem[name]:
                    model(input_ids=ids, use_cache=True, logits_to_keep=1)
                    synchronize(self.device)
                if name == "routed":
                    skip.add(model)
        fl = self._flops(skip, 1, batch * seq, batch * flops.causal_context(seq), batch)
        by = self._bytes(skip, batch * seq, batch * seq, batch)
        return self._figures(times, fl, by, skip, mem, work=batch * seq, unit="tokens")

    # -- decode ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, batch: int, prompt: int, steps: int, repeats: int, warmup: int, seed: int = 0) -> dict:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, self.shape.vocab, (batch, prompt), generator=gen).to(self.device)
        feed = torch.randint(0, self.shape.vocab, (batch, steps), generator=gen).to(self.device)
        caches = {}
        with self._routing():
            for name, model in (("dense", self.dense), ("routed", self.routed)):
                caches[name] = model(input_ids=ids, use_cache=True, logits_to_keep=1).cache

            def run(name, model, counter=None):
                def fn():
                    cache = caches[name]
                    excess = cache.get_seq_length() - prompt
                    if excess > 0:
                        cache.crop(-excess)  # back to the prompt (transformers 5: negative = tokens to remove)
                    for t in range(steps):
                        model(input_ids=feed[:, t : t + 1], cache=cache, use_cache=True, logits_to_keep=1)
                        if counter is not None:
                            counter.add(model)

                return fn

            times = interleaved(
                {"dense": run("dense", self.dense), "routed": run("routed", self.routed)},
                self.device,
                repeats,
                warmup,
                clock=self.clock,
            )
            if self.policy is not None:
                self.policy.reset()
            skip = self.counter()
            mem = {}
            for name, model in (("dense", self.dense), ("routed", self.routed)):
                with peak_memory(self.device) as mem[name]:
                    run(name, model, skip if name == "routed" else None)()
                    synchronize(self.device)
        context = batch * sum(prompt + t + 1 for t in range(steps))
        fl = self._flops(skip, 1, batch * steps, context, batch * steps)
        by = self._bytes(skip, batch, context / steps, batch)  # per step: each sequence reads prompt + t + 1 positions
        out = self._figures(times, fl, by, skip, mem, work=batch * steps, unit="tokens")
        for name in ("dense", "routed"):
            out[name]["ms_per_token"] = out[name]["median_s"] / steps * 1e3
        return out

    def _figures(self, times: dict, fl: dict, by: dict, skip: SkipCount, mem: dict, work: int, unit: str) -> dict:
        out = {}
        for name in ("dense", "routed"):
            s = summary(times[name])
            s[f"{unit}_per_s"] = work / s["median_s"]
            s["peak_memory"] = mem.get(name, {})
            out[name] = s
        measured = out["dense"]["median_s"] / out["routed"]["median_s"]
        ideal = min(fl["ideal_speedup"], by["ideal_speedup"])
        out.update(
            measured_speedup=measured,
            ideal_speedup=ideal,
            measured_over_ideal=measured / ideal,
            flop_ideal_speedup=fl["ideal_speedup"],
            bytes_ideal_speedup=by["ideal_speedup"],
            measured_over_flop_ideal=measured / fl["ideal_speedup"],
            measured_over_bytes_ideal=measured / by["ideal_speedup"],
            ideal_kind="flops" if fl["ideal_speedup"] <= by["ideal_speedup"] else "bytes",
            flops=fl,
            bytes=by,
            realized=skip.result(),
        )
        return out


def build(
    model_cfg,
    router_cfg,
    layers,
    device: torch.device,
    dtype: torch.dtype,
    seed: int = 0,
    cache_root: str | None = None,
    clock: str = "wall",
) -> Bench:
    """The dense/routed pair from the bench config (``model.source``: random, hf, testbed or smollm2)."""
    source = model_cfg.get("source", "random")
    if source == "random":
        dense = random_llama(
            model_cfg.hidden,
            model_cfg.layers,
            model_cfg.intermediate,
            model_cfg.heads,
            model_cfg.kv_heads,
            model_cfg.vocab,
            seed=seed,
            device=device,
            dtype=dtype,
        )
    else:
        from hero import backbones

        bed = backbones.bed(model_cfg, cache_root)
        dense = backbones.load(model_cfg, bed, device=device).model.to(dtype)
    checkpoint = router_cfg.get("checkpoint")
    routed = routed_twin(dense, layers, checkpoint)
    policy = None if checkpoint else ForcedSkip(float(router_cfg.ffn_skip), seed=seed)
    return Bench(dense, routed, policy, torch.device(device), clock=clock)


def measure_all(bench: Bench, cfg, log=print) -> dict:
    """Every prefill and decode shape of the config; returns {"prefill": {key: ...}, "decode": {key: ...}}."""
    results: dict = {"prefill": {}, "decode": {}, "skipped_shapes": []}
    for batch in cfg.prefill.batch:
        for seq in cfg.prefill.seq:
            key = f"b{batch}_s{seq}"
            if cfg.prefill.max_tokens and batch * seq > cfg.prefill.max_tokens:
                results["skipped_shapes"].append(f"prefill {key}: {batch * seq} tokens > prefill.max_tokens")
                log(f"prefill {key}: skipped ({batch * seq} tokens > prefill.max_tokens={cfg.prefill.max_tokens})")
                continue
            t0 = time.time()
            r = bench.prefill(batch, seq, cfg.prefill.repeats, cfg.prefill.warmup, seed=cfg.seed)
            results["prefill"][key] = r
            log(
                f"prefill {key}: dense {r['dense']['tokens_per_s']:9.1f} tok/s  routed {r['routed']['tokens_per_s']:9.1f} tok/s"
                f"  {_speedups(r)}  ({time.time() - t0:.0f} s)"
            )
    for batch in cfg.decode.batch:
        key = f"b{batch}_p{cfg.decode.prompt}"
        t0 = time.time()
        r = bench.decode(
            batch, cfg.decode.prompt, cfg.decode.steps, cfg.decode.repeats, cfg.decode.warmup, seed=cfg.seed
        )
        results["decode"][key] = r
        log(
            f"decode  {key}: dense {r['dense']['ms_per_token']:8.2f} ms/step   routed {r['routed']['ms_per_token']:8.2f} ms/step "
            f"  {_speedups(r)}  ({time.time() - t0:.0f} s)"
        )
    return results


def _speedups(r: dict) -> str:
    return (
        f"measured x{r['measured_speedup']:.3f}  ideal x{r['ideal_speedup']:.3f} ({r['ideal_kind']}; flops "
        f"x{r['flop_ideal_speedup']:.3f}, bytes x{r['bytes_ideal_speedup']:.3f})  measured/ideal "
        f"{r['measured_over_ideal']:.3f}  realized ffn skip {r['realized']['ffn_skip']:.3f}"
    )
