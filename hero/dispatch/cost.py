"""What one job of a sweep costs before it is submitted: parameters, memory per GPU, FLOPs, wall time.

``job_cost(spec)`` takes a resolved run (``hero.spec.RunSpec``, composed from ``conf/train.yaml`` as ``train.py``
composes it) and builds its model on the meta device through the method's own ``prepare`` (the router, η and
adapters attached by the code that trains them; no weights read), then counts:

    backbone_params, trainable_params      from the built model (numel), bytes at each tensor's own dtype
    frozen weights                         Σ numel · itemsize of the parameters that do not train
    trainable state                        Σ numel · itemsize · 4: the tensor, its gradient, AdamW's two moments
    activations (per GPU)                  N = micro_batch · length tokens per micro-batch, kept for backward:
        per trainable-path layer             a·N·(3·d + 4·H·h + 3·f) + mask N·length·4 (attention with padding),
                                             but the first (its input needs no gradient: nothing trains below)
        per routable block, router           4·N·(4·d + 3·w_c + 3·w_θ + 2·w_p + s + d_m + 7),
                                             + 4·N·(8·d_m + d_m²) at blocks j > 1 (the memory read, S_{j−1});
                                             float32 under autocast too, as the router computes
        LM head                              16·N·V: logits (a), their fp32 copy for the loss (bf16 only), the
                                             log-softmax (4), its gradient (4), the logits' gradient (a)
      backward's working set               a·N·(2·f + 4·d) + 3·4·N·d_m² (S's gradients, with >1 routable block)
      with gradient checkpointing          each checkpointed block keeps only its inputs a·N·d + 4·N·(d_m² + d_m); one
                                           block's activations, recomputed in backward, join the working set
    evaluation                             frozen weights + eval.batch_size · eval length · (6·V + 16·d): bf16
                                           logits and their fp32 copy; FLOPs from ``EVAL_TOKENS`` (an estimate)
    FLOPs per update                       forward of every layer over the padded positions, backward (input grads)
                                           from the first routable layer up, router and adapters' weight grads,
                                           the LM head forward + input grad, and the checkpointed layers' forward
                                           again (``hero.model.flops`` per token; skip 0: every FFN runs)

a is the activation width in bytes: 2 under bf16 autocast, 4 in fp32. The activation coefficients are the tensors
autograd saves on this code path, listed with ``torch.autograd.graph.saved_tensors_hooks`` on the testbed and
SmolLM2 (docs/planner/README.md, where they are held against measured runs). Time per update (``update_seconds``)
= FLOPs / (peak · util) + traffic / bandwidth of a named ``DEVICES`` row at a stated utilisation, traffic being
``TRAFFIC_PER_ACTIVATION_BYTE`` × the activations the forward produces; ``cpu`` is this machine, one thread, at
its SGEMM rate and copy bandwidth measured on the process clock (``hero.dispatch.measure.host_rates``).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from hero.errors import ConfigError
from hero.model import flops

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
GIB = 1024**3


class PlanError(ConfigError):
    """Bad input to the planner (an unknown device, study file or override), one line."""


@dataclass(frozen=True)
class Device:
    """A card: its memory and its dense peak (TFLOP/s, no sparsity) for bf16 and fp32 (TF32 on tensor cores)."""

    name: str
    memory_gib: float
    bf16_tflops: float
    fp32_tflops: float
    bandwidth_gbs: float  # memory bandwidth, GB/s
    note: str = ""

    def usable_bytes(self) -> float:
        """What a job may allocate: 95 % of the card less 1 GiB (CUDA context, allocator slack); all of it on CPU."""
        if self.name == "cpu":
            return self.memory_gib * GIB
        return self.memory_gib * GIB * 0.95 - GIB

    def peak_flops(self, precision: str) -> float:
        return 1e12 * (self.bf16_tflops if precision == "bf16" else self.fp32_tflops)


# Vendor datasheets, dense (no 2:4 sparsity), bf16 with fp32 accumulate.
DEVICES = {
    "h100": Device("h100", 80, 989, 495, 3350, "H100 SXM 80 GB"),
    "h100-pcie": Device("h100-pcie", 80, 756, 378, 2000, "H100 PCIe 80 GB"),
    "a100-80gb": Device("a100-80gb", 80, 312, 156, 2039, "A100 SXM 80 GB"),
    "l40s": Device("l40s", 48, 362, 183, 864, "L40S 48 GB"),
    # The paper's cards: 4 x RTX 4090D with 48 GB (HERO_SPEC §6). The 4090's 165 TFLOP/s bf16 (fp32 accumulate,
    # Ada whitepaper) scaled by the 4090D's 114 of 128 SMs.
    "rtx4090d-48gb": Device("rtx4090d-48gb", 48, 147, 73.5, 1008, "RTX 4090D 48 GB (the paper's)"),
    "rtx-a6000": Device("rtx-a6000", 48, 155, 77.4, 768, "RTX A6000 48 GB"),
    "l40": Device("l40", 48, 181, 90.5, 864, "L40 48 GB"),
    "a40": Device("a40", 48, 150, 74.8, 696, "A40 48 GB"),
}
# Utilisation assumed for a GPU row unless --util says otherwise: a share of the dense peak typical of a
# Hugging Face training step with gradient checkpointing (not measured here: no GPU in this project's runs).
GPU_UTIL = 0.4
# This CPU: the matmuls at its measured 1-thread SGEMM rate (utilisation 1), the rest of an update memory-bound.
CPU_UTIL = 1.0
# Bytes an update moves through memory per byte of activations it produces (forward writes them, backward reads
# them and writes and reads their gradients; elementwise passes in the router and norms read them again): fitted
# once on the testbed's measured updates (docs/planner/README.md), then held against SmolLM2's.
TRAFFIC_PER_ACTIVATION_BYTE = 19.0


def cpu_device(gflops: float, bandwidth_gbs: float, memory_gib: float | None = None) -> Device:
    """This machine, one thread: ``gflops`` its float32 SGEMM rate and ``bandwidth_gbs`` its copy bandwidth (read +
    write), both on the process clock (``hero.dispatch.measure.host_rates``); bf16 counted at the fp32 rate."""
    if memory_gib is None:
        import os

        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    note = f"this CPU, 1 thread, SGEMM {gflops:.0f} GFLOP/s, copy {bandwidth_gbs:.1f} GB/s"
    return Device("cpu", memory_gib, gflops / 1e3, gflops / 1e3, bandwidth_gbs, note)


def device_names() -> str:
    return ", ".join([*DEVICES, "cpu"])


# Known backbone shapes (public configs), used when model.path is a hub id this machine cannot read.
KNOWN_SHAPES = {
    "llama3_1_8b": dict(
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=False,
    ),
    "llama2_7b": dict(
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=11008,
        num_attention_heads=32,
        num_key_value_heads=32,
        vocab_size=32000,
        tie_word_embeddings=False,
    ),
    "llama2_13b": dict(
        hidden_size=5120,
        num_hidden_layers=40,
        intermediate_size=13824,
        num_attention_heads=40,
        num_key_value_heads=40,
        vocab_size=32000,
        tie_word_embeddings=False,
    ),
}
# Training samples of a hub data set this machine cannot read: Tulu-3 SFT mixture, 939,344 (HERO_SPEC §6).
KNOWN_SAMPLES = {"tulu3": 939_344}
# Evaluation requests × tokens of a suite, an estimate (not measured here): lm-eval's log-likelihood requests are one
# forward per (context, choice): split size × choices × (few-shot context + continuation) tokens, public split sizes.
EVAL_TOKENS = {
    # arc_easy 2,376 × 4 × ~1,100 (25-shot); arc_challenge 1,172 × 4 × ~1,200; hellaswag 10,042 × 4 × ~600 (5-shot);
    # winogrande 1,267 × 2 × ~200; openbookqa 500 × 4 × ~30; piqa 1,838 × 2 × ~50; boolq 3,270 × 2 × ~150
    "paper7": (42_000_000, 1_536),
    # + GSM8K 1,319 × (8-shot ~900 + 256 generated), HumanEval 164 × (~150 + 512 generated)
    "extended9": (43_700_000, 1_536),
}


def compose_job(overrides, config_name: str = "train", report_missing: bool = False):
    """The ``RunSpec`` of one job: ``conf/<config_name>.yaml`` composed with the overrides, every check run.

    A cost knob left at ``calibrated`` whose calibration file has no entry yet is planned at the knob's default
    (what it costs does not depend on its value); ``report_missing``: (spec, whether that happened)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from hero.spec import RunSpec

    overrides = [o for o in overrides if not o.split("=", 1)[0].lstrip("+~").startswith("hydra")]

    def resolve(chosen):
        try:
            with initialize_config_dir(CONF_DIR, version_base=None):
                cfg = compose(config_name, overrides=list(chosen))
        except HydraException as err:
            raise PlanError(" ".join(str(err).split("Config search path")[0].split())) from None
        return RunSpec.resolve(cfg)

    missing = False
    try:
        spec = resolve(overrides)
    except ConfigError:
        calibrated = [o for o in overrides if o.split("=", 1)[-1] == "calibrated"]
        if not calibrated:
            raise
        spec, missing = resolve([o for o in overrides if o not in calibrated]), True
    return (spec, missing) if report_missing else spec


def backbone_config(spec):
    """The transformers config of the run's backbone (a bed's own file, a local copy, or ``KNOWN_SHAPES``)."""
    from transformers import AutoConfig, LlamaConfig

    from hero import backbones

    model_cfg = spec.model
    if model_cfg.source in backbones.BEDS:
        bed = backbones.bed(model_cfg, spec.cache)
        return AutoConfig.from_pretrained(str(bed.backbone_dir)), bed
    path = backbones.resolve_path(model_cfg)
    if Path(path).is_dir():
        return AutoConfig.from_pretrained(path), None
    if model_cfg.name in KNOWN_SHAPES:
        return LlamaConfig(**KNOWN_SHAPES[model_cfg.name]), None
    raise PlanError(
        f"model={model_cfg.name}: no local config at {path!r} and no known shape; point model.path at a local copy"
    )


def build_meta(spec, config):
    """(model with the method attached on the meta device, backbone parameter count, routable layers)."""
    from transformers import AutoModelForCausalLM

    from hero.backbones import DTYPES
    from hero.model.attach import resolve_layers

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[spec.model.dtype])
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    backbone = sum(p.numel() for p in model.parameters())
    layers = resolve_layers(spec.layer_choice, config.num_hidden_layers)
    try:
        with torch.device("meta"):
            prepared = spec.method.prepare(spec, model, None, layers, None)
    except (ConfigError, AttributeError, TypeError, RuntimeError, NotImplementedError):
        # a method whose preparation reads data through the model (static_drop ranks the FFNs on calibration
        # batches) cannot be built without weights; it trains nothing, so the frozen backbone is its cost
        return model, backbone, layers
    return prepared.model, backbone, layers


@dataclass
class JobCost:
    """One job's cost (module docstring); bytes per GPU, FLOPs per update / evaluation, seconds at ``util``."""

    name: str
    backbone_params: int
    trainable_params: int
    router_params: int | None
    routable_layers: list[int]
    world: int
    micro_batch: int
    length: int  # tokens per sequence the activation figure assumes (data.max_length: the worst micro-batch)
    mean_length: float  # padded positions per sequence the FLOP figure assumes
    length_from: str  # where mean_length comes from: the run's own data and sample order, --length, or max_length
    updates: int
    precision: str
    checkpointing: bool
    memory: dict = field(default_factory=dict)  # bytes per GPU by part
    memory_other: dict = field(default_factory=dict)  # the activations with checkpointing toggled
    flops_update: float = 0.0  # per update, summed over the GPUs
    traffic_update: float = 0.0  # bytes moved through memory per update, summed over the GPUs
    flops_eval: float | None = None
    eval_memory: float | None = None
    eval_batch: int = 1  # eval.batch_size, what the evaluation's memory figure assumes
    # exact training options the figures do not model (hero.update): the LM head at labelled positions only, sub-batches
    # by length; the activations, LM head and FLOPs above are then those of the full padded micro-batch, an upper bound
    unmodelled: tuple[str, ...] = ()

    @property
    def peak_bytes(self) -> float:
        return max(sum(self.memory.values()), self.eval_memory or 0.0)

    def seconds(self, device: Device, util: float) -> float:
        """Wall time of the job on ``world`` such devices: training + evaluation at ``util`` of the dense peak."""
        train = self.updates * update_seconds(self.flops_update, self.traffic_update, device, self.precision, util)
        return train / self.world + (self.flops_eval or 0.0) / (device.peak_flops(self.precision) * util)

    def as_dict(self) -> dict:
        return asdict(self)


def update_seconds(flops_: float, traffic: float, device: Device, precision: str, util: float) -> float:
    """Seconds of one update on one device: its FLOPs at ``util`` of the dense peak, plus its memory traffic at the
    device's bandwidth (the roofline's two sides added, as an update alternates matmuls and elementwise passes)."""
    return flops_ / (device.peak_flops(precision) * util) + traffic / (device.bandwidth_gbs * 1e9)


def update_traffic(acts_full: dict) -> float:
    """Bytes one micro-batch moves: ``TRAFFIC_PER_ACTIVATION_BYTE`` × what its forward produces (the activations
    without checkpointing and one copy of the logits, ``activations(..., checkpointing=False)``)."""
    return TRAFFIC_PER_ACTIVATION_BYTE * (acts_full["activations"] + acts_full["logits"])


def activation_width(spec) -> int:
    return 2 if spec.trainer.precision == "bf16" else 4


def weight_width(spec) -> int:
    """Bytes per frozen weight (``model.dtype``): 2 for bfloat16 / float16, 4 for float32."""
    return 4 if spec.model.dtype == "float32" else 2


def activations(
    shape: flops.Shape,
    router,
    tokens: int,
    length: int,
    trainable_path: int,
    routable: int,
    a: int,
    checkpointing: bool,
    w: int | None = None,
) -> dict:
    """Bytes kept for backward in one micro-batch of ``tokens`` positions (sequences of ``length``), by part.

    ``a``: bytes of an activation (2 under bf16 autocast), ``w``: of the frozen weights and so of the residual
    stream (default ``a``); where they differ autocast keeps a copy at width ``a`` of every frozen weight that
    backward multiplies by (the trainable path's linears and the LM head; recomputed in checkpointed blocks).

    ``trainable_path``: decoder layers from the first routable one up (what backward runs through);
    ``routable``: routable blocks (each carries a router). See the module docstring for the terms."""
    d, f, hh = shape.hidden, shape.intermediate, shape.heads * shape.head_dim
    w = a if w is None else w
    kv = shape.kv_heads * shape.head_dim
    layer_weights = d * (2 * hh + 2 * kv) + 3 * d * f
    head_copy = a * shape.vocab * d if a != w and trainable_path else 0
    weight_copies = a * max(trainable_path - 1, 0) * layer_weights if a != w else 0
    layer = a * tokens * (3 * d + 4 * hh + 3 * f) + tokens * length * 4
    m = router.memory_dim if router is not None else 0
    r = 4  # the router computes in float32, under autocast too (hero.model.router)
    if router is not None and router.history_branch:
        # norms' inputs and the gated FFN's input (4·d), the content encoder (3·w_c), the history head and local
        # head (3·w_θ), the path encoder (2·w_p), the history head's input (s + d_m + 1), path features (6)
        block = (
            r
            * tokens
            * (
                4 * d
                + 3 * router.content_hidden
                + 3 * router.head_hidden
                + 2 * router.path_hidden
                + router.state_dim
                + m
                + 1
                + 6
            )
        )
        # blocks j > 1 read the memory: q, φ(q), the read, its projections for ν (8·d_m) and S_{j−1} (d_m²)
        later = r * tokens * 8 * m if router.memory_read else 0
        carry = r * tokens * m * m if router.memory_read else 0
    elif router is not None:
        local = router.local_head_hidden if isinstance(router.local_head_hidden, int) else router.head_hidden
        block, later, carry = r * tokens * (4 * d + 3 * local), 0, 0
    else:
        block, later, carry = 0, 0, 0
    # logits (a), their fp32 copy for the loss (none in fp32), the log-softmax (4), its gradient (4), the logits'
    # gradient (a): 16 bytes per (position, vocabulary entry) either way
    head = tokens * shape.vocab * (a + (4 if a != 4 else 0) + 4 + 4 + a)
    # backward's working set through one block: the gradients of its FFN and residual stream and of the memory
    # state S (the carry's gradient, S_j's and ρ·S_{j-1}'s) live at once
    working = a * tokens * (2 * f + 4 * d) + (3 * carry if routable > 1 else 0) if trainable_path else 0
    if not checkpointing:
        # the first layer of the path keeps nothing of its own: its input needs no gradient (nothing trains below)
        kept = max(trainable_path - 1, 0) * layer + routable * block + max(routable - 1, 0) * (carry + later)
        kept += w * tokens * d if trainable_path else 0  # the final norm's input
        kept += head_copy + weight_copies
        return {"activations": kept, "backward": working, "lm_head": head, "logits": tokens * shape.vocab * a}
    # each checkpointed block keeps its inputs (hidden states; the carry S, ζ from block 2 on) and the final norm's
    # input; backward recomputes one block at a time, whose activations join its working set
    # (hidden states twice, at the residual stream's width; the carry: S, ζ and two float32 d-vectors of the path)
    carried = carry + r * tokens * (m + 2 * d) if carry else 0
    inputs = 2 * trainable_path * w * tokens * d + max(routable - 1, 0) * carried + w * tokens * d + head_copy
    return {
        "activations": inputs,
        "backward": working + layer + block + later + carry + a * layer_weights * (a != w),
        "lm_head": head,
        "logits": tokens * shape.vocab * a,
    }


def update_flops(
    shape: flops.Shape,
    router_per_token: float,
    first: int,
    positions: float,
    length: float,
    checkpointing: bool,
) -> float:
    """FLOPs of one update over ``positions`` padded positions (sequences of mean padded ``length``), no token
    skipped (every FFN runs, no adapter: the start of training, the most an update costs)."""
    tokens_per_seq = max(length, 1.0)
    sequences = positions / tokens_per_seq
    per_layer = positions * (flops.attention_proj_flops(shape) + flops.ffn_flops(shape)) + sequences * (
        flops.attention_core_flops(shape, flops.causal_context(int(round(tokens_per_seq))))
    )
    top = shape.layers - first
    head = positions * flops.lm_head_flops(shape)
    router = positions * router_per_token
    forward = shape.layers * per_layer + head + router
    backward = top * per_layer + head + 2 * router  # input grads of the frozen ops, input + weight grads of router
    recompute = top * per_layer + router if checkpointing else 0.0
    return forward + backward + recompute


def data_positions(spec, bed, world: int, updates: int) -> tuple[float, float]:
    """(mean padded positions per update over all GPUs, mean padded length per sequence), from the run's own data
    and seeded sample order when its training set is on this machine (a bed); (None, None) when it is not."""
    if bed is None:
        return None, None
    from transformers import AutoTokenizer

    from hero.data import load_conversations
    from hero.data.sft import tokenize_conversation
    from hero.training import sample_order

    tok = AutoTokenizer.from_pretrained(str(bed.backbone_dir))
    convs = load_conversations(spec.data, bed)
    lengths = [
        len(tokenize_conversation(tok, c, spec.data.max_length, spec.data.assistant_only_loss)["input_ids"])
        for c in convs
    ]
    tcfg = spec.trainer
    order = sample_order(len(lengths), updates, tcfg.global_batch, spec.seed)
    total = 0
    for lo in range(0, len(order), tcfg.micro_batch):
        chunk = order[lo : lo + tcfg.micro_batch]
        total += len(chunk) * max(lengths[i] for i in chunk)
    per_update = total / updates
    return per_update, per_update / tcfg.global_batch


def num_samples(spec, bed) -> int:
    if bed is not None:
        from hero.data import load_conversations

        return len(load_conversations(spec.data, bed))
    if spec.data.get("max_samples"):
        return int(spec.data.max_samples)
    if spec.data.name in KNOWN_SAMPLES:
        return KNOWN_SAMPLES[spec.data.name]
    raise PlanError(f"data={spec.data.name}: its size is unknown here; pass --samples N")


def resolve_router(spec, shape: flops.Shape, layers):
    """The run's RouterConfig as it trains (a ``matched`` local head at its width), None for a method without one."""
    from hero.model.config import RouterConfig
    from hero.model.controls import resolve_matched

    router = spec.options.get("router") if spec.method.routes else None
    if not isinstance(router, RouterConfig):  # another method's router (SkipGPT-RT's) or none: no HeRo router
        return None
    return resolve_matched(router, shape.hidden, len(layers))


def job_cost(
    spec, world: int = 1, length: int | None = None, samples: int | None = None, trial_fraction: float = 1.0
) -> JobCost:
    """The cost of one job (module docstring). ``length``: padded tokens per sequence to assume where the data is
    not on this machine (default data.max_length, an upper bound); ``samples``: its training set size."""
    from hero.training import total_updates

    config, bed = backbone_config(spec)
    model, backbone, layers = build_meta(spec, config)
    shape = flops.Shape.from_config(config)
    tcfg = spec.trainer
    if tcfg.global_batch % (world * tcfg.micro_batch):
        raise PlanError(
            f"trainer.global_batch={tcfg.global_batch} is not divisible by {world} GPU(s) × "
            f"trainer.micro_batch={tcfg.micro_batch}"
        )
    trainable = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    n = samples if samples is not None else num_samples(spec, bed)
    updates = total_updates(tcfg, n) if trainable else 0  # a method that trains nothing only evaluates
    if trial_fraction < 1.0:
        updates = max(1, math.ceil(updates * trial_fraction))
    routes = spec.method.routes
    router = resolve_router(spec, shape, layers)
    a = activation_width(spec)
    max_len = int(length or spec.data.max_length)
    tokens = tcfg.micro_batch * max_len
    first = min(layers) if layers else 0
    trains_path = shape.layers - first if trainable else 0
    ckpt = bool(tcfg.gradient_checkpointing)
    w = weight_width(spec)
    acts = activations(shape, router, tokens, max_len, trains_path, len(layers) if router else 0, a, ckpt, w)
    other = activations(shape, router, tokens, max_len, trains_path, len(layers) if router else 0, a, not ckpt, w)
    acts.pop("logits"), other.pop("logits")
    if not trainable:  # nothing trains: no update runs, the job only evaluates
        acts, other = dict.fromkeys(acts, 0), dict.fromkeys(other, 0)
    memory = {
        "frozen_weights": sum(p.numel() * p.element_size() for p in frozen),
        "trainable_state": 4 * sum(p.numel() * p.element_size() for p in trainable),
        **acts,
    }
    positions, mean_len = data_positions(spec, bed, world, min(updates, 200)) if updates else (None, None)
    length_from = "the run's data and sample order"
    if positions is None:
        mean_len = float(length or spec.data.max_length)
        positions = tcfg.global_batch * mean_len
        length_from = "--length" if length else "data.max_length: an upper bound (the data is not here; --length N)"
    router_tok = 0.0
    if routes:
        per_block, _ = spec.method.compute_cost(spec.resolved, shape, len(layers))
        router_tok = float(sum(per_block))
    fl = update_flops(shape, router_tok, first, positions, mean_len, ckpt)
    produced = activations(
        shape, router, positions, int(round(mean_len)), trains_path, len(layers) if router else 0, a, False
    )
    traffic = update_traffic(produced) * (4 / 3 if ckpt else 1.0)  # checkpointing runs the forward twice
    eval_flops = eval_mem = None
    if spec.evaluates and spec.eval.suite in EVAL_TOKENS and trial_fraction >= 1.0:
        ev_tokens, ev_len = EVAL_TOKENS[spec.eval.suite]
        per_token = flops.backbone_flops_per_token(shape, ev_len)["total"] + router_tok
        eval_flops = ev_tokens * per_token
        eval_mem = (
            memory["frozen_weights"]
            + memory["trainable_state"] / 4
            + int(spec.eval.batch_size) * ev_len * (shape.vocab * (2 + 4) + 4 * shape.hidden * 4)
        )
    counts = getattr(model, "hero_param_counts", None)
    return JobCost(
        name=spec.model.name,
        backbone_params=backbone,
        trainable_params=sum(p.numel() for p in trainable),
        router_params=counts.get("router") if counts else None,
        routable_layers=list(layers),
        world=world,
        micro_batch=int(tcfg.micro_batch),
        length=max_len,
        mean_length=mean_len,
        length_from=length_from,
        updates=updates,
        precision=str(tcfg.precision),
        checkpointing=ckpt,
        memory=memory,
        memory_other=other,
        flops_update=fl,
        traffic_update=traffic,
        flops_eval=eval_flops,
        eval_memory=eval_mem,
        eval_batch=int(spec.eval.get("batch_size") or 1) if spec.evaluates else 1,
        unmodelled=tuple(
            option
            for option, on in (
                ("trainer.labelled_logits=true", bool(tcfg.get("labelled_logits", False))),
                (f"trainer.pad_waste={tcfg.get('pad_waste', 1.0)}", float(tcfg.get("pad_waste", 1.0)) < 1.0),
            )
            if on
        ),
    )


def fits(cost: JobCost, device: Device) -> bool:
    return cost.peak_bytes <= device.usable_bytes()


def train_bytes(cost: JobCost) -> float:
    """Bytes per GPU while training (the evaluation's peak aside)."""
    return float(sum(cost.memory.values()))


def smallest_fix(cost: JobCost, device: Device, replan) -> str | None:
    """The first change that makes the job fit ``device``, in order of how little it changes the run: for training,
    gradient checkpointing on, then the micro-batch halved (until 1; the global batch stays, accumulation grows);
    for evaluation, ``eval.batch_size`` halved (same scores, more forward calls); else the smallest card of
    ``DEVICES`` that holds the job as it is. ``replan(extra_overrides)`` → the JobCost with those overrides added."""
    usable = device.usable_bytes()
    ckpt = [] if cost.checkpointing else ["trainer.gradient_checkpointing=true"]
    training = [[]] + ([ckpt] if ckpt else [])
    mb = cost.micro_batch
    while mb > 1:
        mb //= 2
        training.append([*ckpt, f"trainer.micro_batch={mb}"])
    for extra in training:
        alt = replan(extra) if extra else cost
        if train_bytes(alt) > usable:
            continue
        batch = cost.eval_batch
        while alt.eval_memory and alt.eval_memory > usable and batch > 1:
            batch //= 2
            extra = [e for e in extra if not e.startswith("eval.batch_size=")] + [f"eval.batch_size={batch}"]
            alt = replan(extra)
        if fits(alt, device):
            return f"{' '.join(extra)} ({alt.peak_bytes / GIB:.1f} GiB)"
        break  # training fits; evaluation cannot be made to
    for dev in sorted(DEVICES.values(), key=lambda d: d.memory_gib):
        if dev.memory_gib > device.memory_gib and fits(cost, dev):
            return f"a bigger card: --device {dev.name} ({dev.memory_gib:g} GB)"
    return None


@contextlib.contextmanager
def quiet():
    """transformers' and the beds' chatter off the planner's output."""
    import io
    import sys

    from hero.backbones import quiet_transformers

    quiet_transformers()
    err, out = sys.stderr, sys.stdout
    sys.stderr = sys.stdout = io.StringIO()
    try:
        yield
    finally:
        sys.stderr, sys.stdout = err, out
