#!/usr/bin/env bash
# vit_keras beside keras-hub and timm on one GPU, without TensorFlow: Keras on JAX (and PyTorch for timm).
#
#   scripts/gpu_benchmark.sh [--quick] [PART] [OUTPUT_DIR]
#
# PART (default all): check | inference | training | attention | all. Each part is one scripts/benchmark.py run of a
# few minutes on an H100/H200, so that a short GPU lease can take one part at a time:
#   check      the device and the choices made for it: vit_keras.hardware.summary() (GPU, precision, attention path);
#              then each attention path on the device's own kernels against the explicit einsum path, on JAX and
#              PyTorch (tests/attention_path_worker.py --check: one block, float32 and bfloat16, forward and
#              gradient, within each precision's bound; the part fails otherwise)
#   inference  ViT-B/16, batch 64: bfloat16 with the input on the device and from host, vit_keras at its automatic
#              attention path and at Keras' own ("keras", the earlier default); float32 with TF32 off and on
#   training   the fine-tuning step, batch 64, bfloat16, the same settings as inference; MFU against the matmul peak;
#              and model.fit around the step (8 batches per call from host memory), as a fraction of the bare step
#   attention  one encoder block per attention path on JAX (einsum, keras, cudnn), forward and forward+backward
# OUTPUT_DIR (default benchmarks/) receives one JSON per part, named for the machine (scripts/benchmark.py).
# --quick: a tiny model and short timings (checks the script in a minute on a CPU; the numbers mean nothing).
#
# Wheels: Keras and keras-hub are not installed on the GPU machine; put them in .gpu/whl/ beforehand (an ignored
# folder that travels with the working tree; see docs/contributing.md; $GPU_WHEELS names another) and this script installs
# them into $GPU_SITE (default /tmp/site) first. Without wheels it uses the Python environment as it is.
set -u -o pipefail
cd "$(dirname "$0")/.."

QUICK=0
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
PART=${1:-all}
OUTPUT_DIR=${2:-benchmarks}
PYTHON=${PYTHON:-python3}
SITE=${GPU_SITE:-/tmp/site}
WHEELS=${GPU_WHEELS:-.gpu/whl}

case "$PART" in check|inference|training|attention|all) ;; *)
  echo "unknown part '$PART': choose check, inference, training, attention or all" >&2; exit 2 ;;
esac

if compgen -G "$WHEELS/*.whl" > /dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$SITE:$PWD"
else
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
fi
# Keras' default backend, TensorFlow, is absent there: the parent process needs a backend too.
export KERAS_BACKEND=${KERAS_BACKEND:-jax} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$OUTPUT_DIR"

if [ "$QUICK" = 1 ]; then
  COMMON=(--quick --min-seconds 0.05 --min-calls 2 --torch-compile off --batch-sizes 2 --matmul-size 128)
  TAG=-quick
  QUICK_FLAG=--quick
else
  QUICK_FLAG=
  COMMON=(--min-seconds 3 --torch-compile on --batch-sizes 64 --matmul-size 8192)
  TAG=
fi

run() {  # one benchmark.py run: its name, then its arguments
  local name=$1; shift
  echo "== $name"
  "$PYTHON" scripts/benchmark.py "${COMMON[@]}" --json "$OUTPUT_DIR/gpu-$name$TAG.json" "$@" || exit 1
}

if [ "$PART" = check ] || [ "$PART" = all ]; then
  echo "== check"
  "$PYTHON" - <<'EOF' || exit 1
import json

import keras

from vit_keras import hardware

kind = hardware.default_kind()
choice = hardware.choose_precision(kind)
print(json.dumps({"keras_backend": keras.backend.backend(), "kind": kind, "precision": choice.policy,
                  "jit_compile": choice.jit_compile, "precision_reason": choice.reason, **hardware.summary()},
                 indent=1))
EOF
  for backend in jax torch; do
    echo "== attention paths on $backend against einsum"
    KERAS_BACKEND=$backend "$PYTHON" tests/attention_path_worker.py --out "$OUTPUT_DIR" --check \
      ${QUICK_FLAG:+"$QUICK_FLAG"} || exit 1
  done
fi
if [ "$PART" = inference ] || [ "$PART" = all ]; then
  run inference-bfloat16 --suite inference --precisions bfloat16 --libraries vit_keras,keras-hub,timm \
    --backends jax --xla on --inputs device,host --attention auto,keras
  run inference-float32 --suite inference --precisions float32 --libraries vit_keras,keras-hub,timm \
    --backends jax --xla on --inputs device --tf32 both
fi
if [ "$PART" = training ] || [ "$PART" = all ]; then
  run training-bfloat16 --suite training --precisions bfloat16 --libraries vit_keras,keras-hub,timm \
    --backends jax --xla on --inputs device,host --attention auto,keras
fi
if [ "$PART" = attention ] || [ "$PART" = all ]; then
  run attention-bfloat16 --suite attention --precisions bfloat16 --backends jax
fi
echo "== done: $OUTPUT_DIR"
