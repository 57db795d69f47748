#!/usr/bin/env bash
# CapsNet train step on an NVIDIA H200: torch and JAX, ours vs the pure
# references, images/s and the fraction of the FLOP floor.
#
# It needs Keras, namex and optree next to torch and JAX (TensorFlow is
# optional: without it there are no TensorFlow rows). On a GPU machine
# without internet access, download the wheels elsewhere into .whl/ (in
# .gitignore) and the script installs them from there:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 \
#       --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 -d .whl \
#       keras==3.15.1 namex==0.1.0 optree==0.20.0
#
# Run `bash benchmarks/gpu.sh`. It prints two tables (the last one: the
# FLOP-floor fractions) and writes $OUT/gpu.json and $OUT/gpu.log.
#
# FLOP floor: 153.9 GFLOP per CapsNet train step at batch 128 (1.2023 GFLOP
# per image). Peaks assumed for an H200 SXM (vendor datasheet, dense):
# 67 TFLOP/s float32 on the CUDA cores and 495 TFLOP/s TF32 on the tensor
# cores. Which one applies depends on the framework: torch keeps float32
# matmuls in full float32 by default (cuDNN convolutions may use TF32);
# XLA on GPU uses TF32 for float32 dots and convolutions by default.
#
# The default plan (CapsNet at batch 128 and 32: torch eager, torch
# with torch.compile, JAX jit; pure torch, pure torch + torch.compile, pure
# JAX) is sized for about 6-8 minutes; GPU_FULL=1 adds JAX without jit and
# Efficient-CapsNet (longer: run it alone). GPU_SMOKE=1
# runs a tiny plan anywhere (batch 2, one step), to check the plumbing.
# No GPU numbers are published yet (only GPU_SMOKE=1 has run, on a CPU
# machine); the CPU numbers and their commands are in benchmarks/README.md.

set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-bench}
mkdir -p "$OUT"

if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    echo "no .whl/ wheels: assuming Keras is installed" >&2
    export PYTHONPATH=$PWD
fi

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 - <<'PY' || exit 1
import jax, keras, torch
print(f"keras {keras.__version__}, torch {torch.__version__} (cuda {torch.cuda.is_available()}, "
      f"allow_tf32 matmul {torch.backends.cuda.matmul.allow_tf32}, "
      f"cudnn {torch.backends.cudnn.allow_tf32}), jax {jax.__version__} {jax.devices()}")
PY

models=capsnet
backends=torch:off,torch:on,jax:on
references=torch,torch-compile,jax
sizes=(--batches 128,32 --repeats 3 --steps 20 --warmup 3)
limits=(--budget 360 --timeout 150)
hard_limit=570
if [ "${GPU_FULL:-0}" = 1 ]; then
    models=capsnet,efficient
    backends=torch:off,torch:on,jax:off,jax:on
fi
if [ "${GPU_SMOKE:-0}" = 1 ]; then  # checks this script's plumbing on any machine
    backends=torch:off,jax:on
    references=torch,jax
    sizes=(--batches 2 --repeats 1 --steps 1 --warmup 1)
    limits=(--timeout 1200)
    hard_limit=3600
fi

# --timeout bounds each worker's compile (and each round), so that a slow
# torch.compile costs one row, not the whole table; --budget stops starting
# workers and rounds in time for the tables to print.
timeout "$hard_limit" python3 benchmarks/train_step.py "${limits[@]}" \
    --models "$models" --backends "$backends" --references "$references" "${sizes[@]}" \
    --peak-tflops fp32=67,tf32=495 --json "$OUT/gpu.json" 2>&1 | tee "$OUT/gpu.log"
