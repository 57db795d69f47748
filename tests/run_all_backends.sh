#!/usr/bin/env bash
# Runs the whole test suite once per backend: TensorFlow, PyTorch, JAX.
#
#   bash tests/run_all_backends.sh            # with the active Python
#   bash tests/run_all_backends.sh --install  # first make .venv and install
#
# Extra arguments go to pytest. Exits non-zero if any backend fails.
set -u
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--install" ]; then
  shift
  python3 -m venv .venv
  # shellcheck disable=SC1091
  . .venv/bin/activate
  python -m pip install -q --upgrade pip
  # Any torch >= 2.1 works. PyPI's Linux torch wheel is the CUDA build:
  # TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu takes the CPU one.
  # tensorflow-cpu is the same TensorFlow without CUDA.
  python -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==2.13.0" \
    || exit 1
  python -m pip install -q tensorflow-cpu -e ".[jax,tfds,test,export]" || exit 1
  # keras-hub without tensorflow-text (which needs the full tensorflow
  # package): the tests build its backbones from configs.
  python -m pip install -q --no-deps "keras-hub==0.32.0" regex tokenizers || exit 1
fi

export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
status=0
summary=""
for backend in tensorflow torch jax; do
  echo "=== KERAS_BACKEND=$backend pytest"
  start=$(date +%s)
  # pytest-xdist: one test process per core; worksteal keeps both busy to
  # the end (the parity workers share their results through a file lock).
  KERAS_BACKEND=$backend python -m pytest -q -n "${PYTEST_WORKERS:-auto}" --maxprocesses 8 \
    --dist worksteal --durations=15 "$@"
  rc=$?
  summary="$summary\n$backend: exit $rc in $(( $(date +%s) - start ))s"
  [ $rc -eq 0 ] || status=1
done
printf "%b\n" "$summary"
exit $status
