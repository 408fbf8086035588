"""``python -m hero.bench train``: one HeRo training update on SmolLM2-135M, timed by phase (issue 37).

Config ``conf/bench_train.yaml``. Every variant (``variants:``, trainer options of ``hero.update``
plus a precision, a forced FFN-skip fraction and the frozen-prefix cache) runs the real update of
``hero.training.fit``: ``micro_batch_loss`` under autocast, backward, grad-clip, AdamW step. Variants
are timed interleaved (round-robin, rotated each repeat) on the same micro-batches; the trainable
tensors are put back before every update, so every repeat starts from the same router.

Phases, from synchronised clock marks set by module hooks inside the update (they add up to the
update's time; ``other`` is what lies outside them: collate, the skip loss's assembly, Python):

    prefix         embeddings and the layers below the first routable one (forward only: nothing trains)
    routable_fwd   the routable layers' forward (attention, router, FFN or adapter)
    head_fwd       final norm, LM head and cross-entropy, the skip loss
    head_bwd       backward through cross-entropy and LM head
    routable_bwd   backward through the routable layers (router, adapters, η; input grads of the rest)
    optimizer      grad-clip and AdamW step

``padding`` is the share of padded positions among the positions the decoder ran. The FLOP ideal
(``hero.model.flops``): real tokens only, logits only where labelled, the prefix forward, the
routable layers forward and backward (input grads of frozen weights, weight grads of the trainable
ones), the head forward and input-grad; the fraction is ideal FLOPs / (time × the 1-thread SGEMM
FLOP/s measured in the same process). ``required_ideal_s`` is the variant's own work at that rate (no
prefix forward where it reads cached states), and ``ceiling_vs_<first variant>`` the first variant's time
over it: the most any fp32 implementation of the variant could gain on this CPU.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from hero.bench.runner import ForcedSkip
from hero.bench.timing import CLOCKS, summary, synchronize
from hero.errors import ConfigError
from hero.model import flops

PHASES = ("prefix", "routable_fwd", "head_fwd", "head_bwd", "routable_bwd", "optimizer", "other")
VARIANT_KEYS = ("labelled_logits", "pad_waste", "precision", "ffn_skip", "prefix_cache")


class PhaseClock:
    """Clock marks inside one update; each mark closes the segment since the previous one with a phase name."""

    def __init__(self, device: torch.device, clock: str = "process"):
        self.device = device
        self.now = CLOCKS[clock]
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.last = self.begin = 0.0
        self.previous = "other"

    def start(self) -> None:
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.previous = "other"
        synchronize(self.device)
        self.last = self.begin = self.now()

    def mark(self, phase: str) -> None:
        synchronize(self.device)
        now = self.now()
        self.totals[phase] += now - self.last
        self.last = now
        self.previous = phase

    def forward_start(self) -> None:
        """A sub-batch's decoder starts: what ran since the last routable layer was the head of the one before."""
        self.mark("head_fwd" if self.previous == "routable_fwd" else "other")

    def head_grad_ready(self) -> None:
        """The loss's backward reached the LM head: before it, the loss's own backward (first sub-batch)
        or the routable backward of the sub-batch before."""
        self.mark("head_bwd" if self.previous == "head_fwd" else "routable_bwd")

    def total(self) -> float:
        return self.last - self.begin


def install_hooks(model, clock: PhaseClock, first: int) -> list:
    """Forward and backward hooks that mark the phase boundaries of ``PHASES``."""
    from hero.model.prefix import causal_lm_parts

    decoder, head = causal_lm_parts(model)
    layers = list(decoder.layers)
    handles = [
        decoder.register_forward_pre_hook(lambda *_: clock.forward_start()),
        layers[first].register_forward_pre_hook(lambda *_: clock.mark("prefix")),
        layers[-1].register_forward_hook(lambda *_: clock.mark("routable_fwd")),
        # Backward: the head's output grad is ready when the loss's backward reaches the head (closes the
        # routable backward of the sub-batch before, if any); its input grad closes the head's backward.
        head.register_full_backward_pre_hook(lambda *_: clock.head_grad_ready()),
        head.register_full_backward_hook(lambda *_: clock.mark("head_bwd")),
    ]
    return handles


def standin_items(tokenizer, max_length: int, count: int, seed: int) -> list[dict]:
    """Training-shaped samples without the sampled bed: the bed's own training prompts (chat template)
    with a response of 10–48 words from the training-side plays (≈ the bed's ≤ 64-token responses)."""
    from hero.data import SFTDataset
    from hero.smollm2.bed import RECIPE, split_prompts
    from hero.smollm2.data import read_plays

    prompts, _ = split_prompts(RECIPE)
    words = " ".join(read_plays(RECIPE.prompt_plays).values()).split()
    rng = random.Random(seed)
    conversations = []
    for _ in range(count):
        n = rng.randint(10, 48)
        start = rng.randrange(len(words) - n)
        conversations.append(
            [
                {"role": "user", "content": rng.choice(prompts)},
                {"role": "assistant", "content": " ".join(words[start : start + n])},
            ]
        )
    dataset = SFTDataset(conversations, tokenizer, max_length, True)
    return [dataset[i] for i in range(len(dataset))]


def bed_items(bed, tokenizer, max_length: int) -> list[dict]:
    from hero.data import SFTDataset

    dataset = SFTDataset(bed.conversations(None, "train"), tokenizer, max_length, True)
    return [dataset[i] for i in range(len(dataset))]


def sgemm_flops_per_s(n: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of an n×n×n float32 matmul at the current thread count (median): the host's practical peak."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times)


def ideal_flops(
    shape: flops.Shape, router_cfg, adapter_dim: int, items, first: int, skipped_share: float, prefix: bool = True
) -> int:
    """FLOPs a perfect implementation needs for the update's samples (see the module docstring).

    ``prefix=False``: without the prefix forward, the work left to an update that reads cached states.
    """
    total = 0
    routable = shape.layers - first
    for item in items:
        t = len(item["input_ids"])
        labelled = sum(1 for x in item["labels"][1:] if x != -100)
        context = flops.causal_context(t)
        attn = t * flops.attention_proj_flops(shape) + flops.attention_core_flops(shape, context)
        ffn = t * flops.ffn_flops(shape)
        total += first * (attn + ffn) if prefix else 0  # prefix forward
        router = sum(t * flops.router_flops(shape, router_cfg, j, routable) for j in range(1, routable + 1))
        skipped = skipped_share * t * routable
        fwd = routable * (attn + ffn) + skipped * (flops.adapter_flops(shape, adapter_dim) - flops.ffn_flops(shape))
        # backward: input grads of every routable op (≈ its forward), weight grads of router and adapters.
        adapter = skipped * flops.adapter_flops(shape, adapter_dim)
        total += (fwd + router) + (fwd + router) + (router + adapter)
        total += 2 * labelled * flops.lm_head_flops(shape)  # head forward + input grad
    return total


def check(cfg: DictConfig) -> None:
    from hero.smollm2.bed import RECIPES

    if cfg.clock not in CLOCKS:
        raise ConfigError(f"clock={cfg.clock!r}: allowed values are {', '.join(CLOCKS)}")
    if cfg.samples not in ("standin", "bed"):
        raise ConfigError(f"samples={cfg.samples!r}: allowed values are standin, bed")
    if cfg.recipe not in RECIPES:
        raise ConfigError(f"recipe={cfg.recipe!r}: allowed values are {', '.join(RECIPES)}")
    if not cfg.variants:
        raise ConfigError("variants: at least one variant is needed")
    for name, variant in cfg.variants.items():
        unknown = set(variant or {}) - set(VARIANT_KEYS)
        if unknown:
            raise ConfigError(f"variants.{name}: unknown keys {sorted(unknown)}; allowed: {', '.join(VARIANT_KEYS)}")
        v = variant or {}
        if v.get("precision", "fp32") not in ("fp32", "bf16"):
            raise ConfigError(f"variants.{name}.precision={v.get('precision')!r}: allowed values are fp32, bf16")
        skip = v.get("ffn_skip")
        if skip is not None and not 0.0 <= float(skip) <= 1.0:
            raise ConfigError(f"variants.{name}.ffn_skip={skip!r}: must lie in [0, 1] or be null (the router decides)")
        waste = v.get("pad_waste", 1.0)
        if not 0.0 <= float(waste) <= 1.0:
            raise ConfigError(f"variants.{name}.pad_waste={waste!r}: must lie in [0, 1]")


def run(cfg: DictConfig) -> dict:
    import hero
    from hero.model.config import RouterConfig
    from hero.model.trace import forced_routing
    from hero.smollm2.bed import RECIPES, ensure_smollm2
    from hero.training import autocast_context, sample_order
    from hero.update import micro_batch_loss, prefix_states

    check(cfg)
    torch.set_num_threads(int(cfg.threads))
    torch.manual_seed(cfg.seed)
    device = torch.device("cpu")
    start_wall = time.time()
    if cfg.samples == "bed":
        bed = ensure_smollm2(cfg.cache, RECIPES[cfg.recipe])
        backbone_dir = bed.backbone_dir
    else:
        bed = None
        backbone_dir = _backbone_only(cfg.cache)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(backbone_dir))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(backbone_dir), dtype=torch.float32)
    router_cfg = RouterConfig(**OmegaConf.to_container(cfg.router, resolve=True))
    hero.attach(model, cfg.layer_set, router_cfg)
    model.train()
    first = min(model.hero_layers)
    shape = flops.Shape.from_config(model.config)
    adapter_dim = router_cfg.resolved_adapter_dim(shape.hidden)

    pool = (
        bed_items(bed, tokenizer, cfg.max_length)
        if bed
        else standin_items(tokenizer, cfg.max_length, cfg.standin_samples, cfg.seed)
    )
    order = sample_order(len(pool), cfg.updates, cfg.global_batch, cfg.seed)
    batches = [[pool[i] for i in order[u * cfg.global_batch : (u + 1) * cfg.global_batch]] for u in range(cfg.updates)]
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    params = list(named.values())
    snapshot = {n: p.detach().clone() for n, p in named.items()}
    states = {}
    if any((v or {}).get("prefix_cache") for v in cfg.variants.values()):
        for u, batch in enumerate(batches):
            states[u] = prefix_states(model, batch, first)

    clock = PhaseClock(device, cfg.clock)
    handles = install_hooks(model, clock, first)
    optimizers = {name: torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01) for name in cfg.variants}
    padded = {}

    def update(name: str, u: int) -> dict:
        v = cfg.variants[name] or {}
        with torch.no_grad():
            for n, p in named.items():
                p.copy_(snapshot[n])
        items = batches[u]
        skip = v.get("ffn_skip")
        prefix = (first, states[u]) if v.get("prefix_cache") else None
        policy = ForcedSkip(float(skip), seed=cfg.seed) if skip is not None else None
        opt = optimizers[name]
        clock.start()
        with forced_routing(model, policy) if policy else nullcontext():
            with autocast_context(v.get("precision", "fp32"), device):
                loss, _, _, records, mask = micro_batch_loss(
                    model,
                    items,
                    tokenizer.pad_token_id,
                    device,
                    cfg.alpha,
                    True,
                    None,
                    bool(v.get("labelled_logits", False)),
                    float(v.get("pad_waste", 1.0)),
                    prefix,
                )
            clock.mark("head_fwd")
            loss.backward()
            clock.mark("routable_bwd")
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        clock.mark("optimizer")
        out = dict(clock.totals)
        out["total"] = clock.total()
        out["unaccounted"] = out["total"] - sum(clock.totals.values())
        real = int(mask.sum())
        executed = sum(int((r.ffn_executed & mask.bool()).sum()) for r in records)
        out["skip"] = 1.0 - executed / (real * len(records))
        out["tokens"] = real
        out["loss"] = float(loss.detach())
        padded[name] = _positions(items, float(v.get("pad_waste", 1.0)))
        return out

    names = list(cfg.variants)
    for name in names:  # warm-up
        for u in range(min(cfg.warmup, cfg.updates)):
            update(name, u)
    runs = {name: [] for name in names}
    load = []
    for r in range(cfg.repeats):
        rotated = names[r % len(names) :] + names[: r % len(names)]
        for name in rotated:
            runs[name].append(update(name, r % cfg.updates))
        load.append(os.getloadavg()[0])
    for h in handles:
        h.remove()
    peak = sgemm_flops_per_s()
    threads = torch.get_num_threads()
    results = {}
    base = names[0]
    for name in names:
        rows = runs[name]
        totals = [row["total"] for row in rows]
        med = statistics.median(totals)
        v = cfg.variants[name] or {}
        items_all = [item for u in range(cfg.updates) for item in batches[u]]
        skip = statistics.mean(row["skip"] for row in rows)
        ideal = ideal_flops(shape, router_cfg, adapter_dim, items_all, first, skip) / cfg.updates
        if v.get("prefix_cache"):
            required = ideal_flops(shape, router_cfg, adapter_dim, items_all, first, skip, prefix=False) / cfg.updates
        else:
            required = ideal
        required_s = required / peak
        real_positions, run_positions = padded[name]
        results[name] = {
            "options": OmegaConf.to_container(cfg.variants[name] or {}, resolve=True) if cfg.variants[name] else {},
            "update_s": summary(totals),
            "phases_s": {p: statistics.median(row[p] for row in rows) for p in PHASES},
            "phases_unaccounted_s": max(abs(row["unaccounted"]) for row in rows),
            "tokens_per_s_per_core": statistics.median(row["tokens"] / row["total"] for row in rows) / threads,
            "updates_per_core_hour": 3600.0 / (med * threads),
            "padding_share": 1.0 - real_positions / run_positions,
            "realized_ffn_skip": skip,
            "flop_ideal_fraction": ideal / (med * peak),  # of the fp32 SGEMM rate, also for bf16
            # the variant's own work (no prefix when cached) at the fp32 SGEMM rate: no fp32 update doing it is faster
            "required_ideal_s": required_s,
            "loss": statistics.median(row["loss"] for row in rows),
            "precision": v.get("precision", "fp32"),
        }
    for name in names:
        results[name]["ratio_vs_" + base] = (
            results[name]["updates_per_core_hour"] / results[base]["updates_per_core_hour"]
        )
        results[name]["ceiling_vs_" + base] = results[base]["update_s"]["median_s"] / results[name]["required_ideal_s"]
    out = {
        "backbone": "smollm2_135m",
        "samples": cfg.samples,
        "recipe": cfg.recipe if cfg.samples == "bed" else None,
        "global_batch": cfg.global_batch,
        "routable_layers": model.hero_layers,
        "threads": threads,
        "clock": cfg.clock,
        "sgemm_gflops": peak / 1e9,
        "load_average_during": {"min": min(load), "median": statistics.median(load), "max": max(load)},
        "cpu_flags": _cpu_flags(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the kernels ATen ran (ATEN_CPU_CAPABILITY)
        "variants": results,
        "wall_time_s": time.time() - start_wall,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    _print(out, names)
    return out


def _positions(items, pad_waste: float) -> tuple[int, int]:
    """(real positions, positions the decoder ran) of one micro-batch under ``pad_waste``."""
    from hero.update import length_groups

    lengths = [len(item["input_ids"]) for item in items]
    groups = length_groups(lengths, pad_waste)
    return sum(lengths), sum(max(lengths[i] for i in g) * len(g) for g in groups)


def _backbone_only(cache) -> Path:
    """The converted SmolLM2 backbone (built once under the lock), without the sampled data."""
    from hero.once import built_once, resolve_cache_root
    from hero.smollm2.convert import convert, file_sha256, gguf_path

    source = gguf_path()
    backbone_dir = resolve_cache_root(cache) / "smollm2" / file_sha256(source)[:12] / "backbone"
    built_once(
        backbone_dir, "gguf.json", lambda tmp: convert(tmp, source), "the backbone (de-quantising Q4_1)", "smollm2"
    )
    return backbone_dir


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in flags if f.startswith(("avx", "amx")))


def _print(out: dict, names: list[str]) -> None:
    samples = f"{out['samples']} samples" + (f" ({out['recipe']} recipe)" if out["recipe"] else "")
    print(
        f"hero.bench train: SmolLM2-135M, {samples}, {out['global_batch']} samples/update, "
        f"routable {out['routable_layers'][0]}-{out['routable_layers'][-1]}, {out['threads']} thread(s), "
        f"{out['clock']} clock, SGEMM {out['sgemm_gflops']:.1f} GFLOP/s, load {out['load_average_during']['median']:.2f}",
        flush=True,
    )
    head = f"{'variant':<14}{'update s':>9}{'×':>6}{'ceil ×':>7}{'tok/s/core':>11}{'upd/core-h':>11}{'pad':>6}{'skip':>6}{'FLOP%':>6}"
    print(head + "".join(f"{p:>13}" for p in PHASES))
    for name in names:
        r = out["variants"][name]
        ratio = next(v for k, v in r.items() if k.startswith("ratio_vs_"))
        ceiling = next(v for k, v in r.items() if k.startswith("ceiling_vs_"))
        line = (
            f"{name:<14}{r['update_s']['median_s']:>9.3f}{ratio:>6.2f}{ceiling:>7.2f}{r['tokens_per_s_per_core']:>11.0f}"
            f"{r['updates_per_core_hour']:>11.0f}{r['padding_share']:>6.1%}{r['realized_ffn_skip']:>6.1%}"
            f"{r['flop_ideal_fraction']:>6.1%}"
        )
        print(line + "".join(f"{r['phases_s'][p]:>13.3f}" for p in PHASES), flush=True)
