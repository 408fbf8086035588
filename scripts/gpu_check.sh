#!/usr/bin/env bash
# GPU check (issue 60): what the CPU test suite cannot reach, on one machine with a CUDA GPU, in under 8 minutes.
# Not required by `make test`. UNTESTED ON A GPU: written in a session without one (docs/planner/README.md).
#
#   bash scripts/gpu_check.sh            # writes outputs/gpu_check/ (override with OUT=...)
#
# 1. the CUDA path of the pipeline: train.py on SmolLM2 with the paper's trainer (bf16 autocast, gradient
#    checkpointing) for 3 updates, then the same under torchrun with 2 processes if the machine has 2 GPUs (nccl)
# 2. the planner's and the paper path's tests on this machine (the paper path pins itself to CPU + gloo)
# 3. the planner against the GPU: 3 real updates of SmolLM2 under trainer=paper (hero.dispatch.measure --device
#    cuda: time, saved activations, peak allocated memory) beside its prediction at the GEMM rate and copy
#    bandwidth measured there, then the planner's figure for the paper's job on an H100
# 4. the inference bench on the GPU (python -m hero.bench device=cuda shape=llama3_1_8b), short
# Each step has its own time limit; the script stops at the first failure and says which step it was.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
OUT=${OUT:-outputs/gpu_check}
mkdir -p "$OUT"
step() { echo; echo "== $1"; }
trap 'echo "gpu_check: FAILED at: ${CURRENT:-setup}" >&2' ERR

CURRENT="CUDA visible"
step "$CURRENT"
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0), torch.version.cuda)"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv || true
GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")

CURRENT="1. train.py on CUDA, trainer=paper, 3 updates (SmolLM2)"
step "$CURRENT"
timeout 150 $PY train.py experiment=smollm2_cpu trainer=paper trainer.max_steps=3 trainer.global_batch=16 \
  trainer.micro_batch=4 trainer.progress=false eval=none logger=none force=true paths.root="$OUT/runs"
if [ "$GPUS" -ge 2 ]; then
  CURRENT="1b. the same under torchrun, 2 GPUs (nccl)"
  step "$CURRENT"
  timeout 150 $PY -m torch.distributed.run --nproc_per_node 2 train.py experiment=smollm2_cpu trainer=paper \
    trainer.max_steps=3 trainer.global_batch=16 trainer.micro_batch=4 trainer.progress=false eval=none \
    logger=none force=true paths.root="$OUT/runs_ddp"
fi

CURRENT="2. tests/test_planner.py tests/test_paper_path.py"
step "$CURRENT"
timeout 120 $PY -m pytest -q -x tests/test_paper_path.py tests/test_planner.py

CURRENT="3. planner vs measured on this GPU"
step "$CURRENT"
timeout 120 $PY -m hero.dispatch.measure --device cuda --updates 3 --out "$OUT/measure_smollm2.json" \
  experiment=smollm2_cpu trainer=paper trainer.global_batch=32 trainer.micro_batch=8 logger=none
$PY - "$OUT/measure_smollm2.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"GEMM {d['sgemm_gflops']:.0f} GFLOP/s bf16, copy {d['bandwidth_gbs']:.0f} GB/s")
for r in d["updates"]:
    print(f"update {r['time_s']:.3f} s, predicted {r['predicted_time_s']:.3f} s "
          f"({r['predicted_time_s'] / r['time_s'] - 1:+.0%}); saved {r['saved_bytes'] / 2**20:.0f} MiB, predicted "
          f"{r['predicted_saved_bytes'] / 2**20:.0f} MiB")
print(f"peak allocated over the updates {d['rss_update_bytes'] / 2**30:.2f} GiB, predicted "
      f"{d['predicted_update_bytes'] / 2**30:.2f} GiB ({d['predicted_update_bytes'] / d['rss_update_bytes'] - 1:+.0%})")
EOF
timeout 60 $PY -m hero.dispatch plan --device h100 --gpus 1 -- python train.py model=llama3_1_8b data=tulu3 \
  trainer=paper eval=paper7 alpha=1e-3 | tee "$OUT/plan_paper_h100.txt" || true

CURRENT="4. inference bench on the GPU"
step "$CURRENT"
timeout 150 $PY -m hero.bench device=cuda shape=llama3_1_8b prefill.max_tokens=0 decode.steps=16 \
  out_dir="$OUT/bench"

echo; echo "gpu_check: all steps passed; outputs in $OUT"
