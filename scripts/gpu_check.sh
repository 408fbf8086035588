#!/usr/bin/env bash
# GPU check (issue 60): what the CPU test suite cannot reach, on one machine with a CUDA GPU, in under 8 minutes.
# Not required by `make test`. UNTESTED ON A GPU: written in a session without one (docs/planner/README.md).
#
#   bash scripts/gpu_check.sh            # writes outputs/gpu_check/ (override with OUT=...)
#
# Nothing is downloaded and no bed is sampled (SmolLM2's bed takes ~10 min to build on a CPU): the backbone is a
# random-weight bf16 Llama with Llama-3.1-8B's layer shape (d 4096, FFN 14336, 32 / 8 heads) but 8 layers, the
# micro testbed's tokenizer (~20 s to build), and data=tulu3 reads tests/fixtures/tulu3_format.jsonl.
#
# 1. the CUDA path of the pipeline: train.py with model=llama3_1_8b pointed at that backbone, trainer=paper (bf16
#    autocast, gradient checkpointing), 3 updates; under torchrun with nccl too when the machine has 2+ GPUs
# 2. the planner's and the paper path's tests on this machine (the paper path pins itself to CPU + gloo)
# 3. the planner against the GPU: hero.dispatch.measure --device cuda, 3 real updates of the same run (time,
#    saved activations, peak allocated memory) beside the planner's prediction at the bf16 GEMM rate and copy
#    bandwidth measured there; then the planner's figure for the paper's job on an H100
# 4. the inference bench on the GPU (python -m hero.bench device=cuda shape=llama3_1_8b), short
# Each step has its own time limit; the script stops at the first failure and says which step it was.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
OUT=$(realpath -m "${OUT:-outputs/gpu_check}")
mkdir -p "$OUT"
step() { echo; echo "== $1"; }
trap 'echo "gpu_check: FAILED at: ${CURRENT:-setup}" >&2' ERR

CURRENT="CUDA visible"
step "$CURRENT"
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0), torch.version.cuda)"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv || true
GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")

CURRENT="0. a random-weight Llama of the 8B layer shape, 8 layers, bf16"
step "$CURRENT"
timeout 120 $PY - "$OUT" <<'EOF'
import shutil, sys
from pathlib import Path
import torch
from hydra import compose, initialize_config_dir
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from hero.backbones import BEDS
out = Path(sys.argv[1]) / "llama8b_shape_8_layers"
if not (out / "model.safetensors").exists() and not list(out.glob("model*.safetensors")):
    with initialize_config_dir(str(Path("conf").resolve()), version_base=None):
        model_cfg = compose("train", overrides=["model.recipe=micro"]).model
    bed = BEDS["testbed"].ensure(model_cfg, None)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(Path(bed.backbone_dir) / name, out / name)
    tok = AutoTokenizer.from_pretrained(str(out))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=4096, intermediate_size=14336, num_hidden_layers=8,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
print(out)
EOF
RUN=(model=llama3_1_8b "model.path=$OUT/llama8b_shape_8_layers" data=tulu3 "data.path=$PWD/tests/fixtures/tulu3_format.jsonl"
     trainer=paper trainer.global_batch=16 trainer.micro_batch=4 alpha=1e-3 eval=none logger=none)

CURRENT="1. train.py on CUDA, trainer=paper, 3 updates"
step "$CURRENT"
timeout 150 $PY train.py "${RUN[@]}" trainer.max_steps=3 trainer.progress=false force=true \
  "paths.root=$OUT/runs"
if [ "$GPUS" -ge 2 ]; then
  CURRENT="1b. the same under torchrun, 2 GPUs (nccl)"
  step "$CURRENT"
  timeout 150 $PY -m torch.distributed.run --nproc_per_node 2 train.py "${RUN[@]}" trainer.max_steps=3 \
    trainer.progress=false force=true "paths.root=$OUT/runs_ddp"
fi

CURRENT="2. tests/test_planner.py tests/test_paper_path.py"
step "$CURRENT"
timeout 120 $PY -m pytest -q -x tests/test_planner.py tests/test_paper_path.py

CURRENT="3. planner vs measured on this GPU"
step "$CURRENT"
timeout 120 $PY -m hero.dispatch.measure --device cuda --updates 3 --out "$OUT/measure.json" "${RUN[@]}"
$PY - "$OUT/measure.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"GEMM {d['sgemm_gflops']:.0f} GFLOP/s bf16, copy {d['bandwidth_gbs']:.0f} GB/s")
for r in d["updates"]:
    print(f"update {r['time_s']:.3f} s, predicted {r['predicted_time_s']:.3f} s "
          f"({r['predicted_time_s'] / r['time_s'] - 1:+.0%}); saved {r['saved_bytes'] / 2**20:.0f} MiB, predicted "
          f"{r['predicted_saved_bytes'] / 2**20:.0f} MiB; FLOPs reach {r['achieved_util']:.0%} of the GEMM rate")
print(f"peak allocated over the updates {d['rss_update_bytes'] / 2**30:.2f} GiB, predicted "
      f"{d['predicted_update_bytes'] / 2**30:.2f} GiB ({d['predicted_update_bytes'] / d['rss_update_bytes'] - 1:+.0%})")
EOF
timeout 60 $PY -m hero.dispatch plan --device h100 --gpus 1 -- python train.py model=llama3_1_8b data=tulu3 \
  trainer=paper eval=paper7 alpha=1e-3 | tee "$OUT/plan_paper_h100.txt" || true

CURRENT="4. inference bench on the GPU"
step "$CURRENT"
timeout 150 $PY -m hero.bench device=cuda shape=llama3_1_8b prefill.max_tokens=0 decode.steps=16 \
  "out_dir=$OUT/bench"

echo; echo "gpu_check: all steps passed; outputs in $OUT"
