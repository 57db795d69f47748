#!/usr/bin/env bash
# The oldest Keras that pyproject.toml allows (`keras>=3.9`), installed into
# the active environment, then the layer and routing tests on PyTorch (Keras
# 3.9 predates the installed JAX's API).
#
#   bash tests/keras_floor.sh     # changes the active environment's Keras
set -u
cd "$(dirname "$0")/.."
floor=$(sed -n 's/.*"keras>=\([0-9.]*\)".*/\1/p' pyproject.toml)
[ -n "$floor" ] || { echo "no keras>= floor in pyproject.toml"; exit 1; }
python -m pip install -q "keras==$floor" || exit 1
python -c "import keras, sys; sys.exit(keras.__version__ not in ('$floor', '$floor.0'))" || exit 1
echo "=== keras $floor, KERAS_BACKEND=torch pytest tests/layers tests/routing"
KERAS_BACKEND=torch python -m pytest -q -n "${PYTEST_WORKERS:-auto}" --maxprocesses 8 \
  -p no:cacheprovider tests/layers tests/routing "$@"
