#!/usr/bin/env bash
# Packaging check: builds the sdist and, from it, the wheel (`python -m build`)
# into a temporary directory, `twine check`s both, checks that both carry the
# checkout's LICENSE, installs the wheel (not the checkout) with one backend
# into a fresh virtual environment outside the checkout, and runs
# .ci/wheel_smoke.py with it from outside the checkout.
#
#   bash .ci/wheel_check.sh   # needs `build` and `twine` (the `release` extra)
#                             # and pip >= 22.3 in the active Python
#   WHEEL_CHECK_BACKEND=jax bash .ci/wheel_check.sh   # or torch; default tensorflow
#
# Exits non-zero, naming the step, if any step fails.
set -u
cd "$(dirname "$0")/.."
checkout=$(pwd)
work=$(mktemp -d)
# Deleted in the background: the venv's ~20,000 files are slow to delete.
trap 'rm -rf "$work" >/dev/null 2>&1 &' EXIT
start=$(date +%s)

# step NAME COMMAND...: runs it with its output in a log, printed only if it
# fails; prints the time it took.
step() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  "$@" >"$work/log" 2>&1
  rc=$?
  echo "$name: $(( $(date +%s) - t0 ))s$([ $rc -eq 0 ] || echo " FAILED (exit $rc)")"
  if [ $rc -ne 0 ]; then
    cat "$work/log"
    exit 1
  fi
}

echo "=== wheel check: build, twine check, install the wheel into a fresh venv, smoke test"
step "python -m build (sdist, then the wheel from it)" python -m build --outdir "$work/dist" .
step "twine check --strict (sdist and wheel)" python -m twine check --strict "$work"/dist/*
wheel=$(ls "$work"/dist/*.whl)
echo "built $(cd "$work/dist" && ls)"

# The license (pyproject.toml's license-files): the checkout's LICENSE, byte
# for byte, at the sdist's root and in the wheel's .dist-info/licenses/.
check_license() {
  python - "$work"/dist/*.tar.gz "$wheel" <<'PY'
import sys, tarfile, zipfile
expected = open("LICENSE", "rb").read()
sdist, wheel = sys.argv[1:3]
with tarfile.open(sdist) as tar:
    names = [n for n in tar.getnames() if n.count("/") == 1 and n.endswith("/LICENSE")]
    found = {"sdist " + n: tar.extractfile(n).read() for n in names}
with zipfile.ZipFile(wheel) as whl:
    names = [n for n in whl.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    found.update({"wheel " + n: whl.read(n) for n in names})
kinds = {name.split()[0] for name in found}
assert kinds == {"sdist", "wheel"}, f"LICENSE missing from: {sorted({'sdist', 'wheel'} - kinds)}"
for name, data in found.items():
    assert data == expected, f"{name} differs from the checkout's LICENSE"
print("\n".join(sorted(found)))
PY
}
step "LICENSE in the sdist and the wheel" check_license

# One backend, TensorFlow by default: the fastest install and smoke test
# together here (JAX installs a few seconds faster but its XLA compilations
# make the smoke test ~5x slower). tensorflow-cpu is the `tensorflow` extra's
# TensorFlow without CUDA; the wheel's own requirements are installed either way.
backend=${WHEEL_CHECK_BACKEND:-tensorflow}
case $backend in
  tensorflow) requirements=("$wheel" tensorflow-cpu) ;;
  torch) requirements=("$wheel[torch]" "torch==2.13.0") ;;
  jax) requirements=("$wheel[jax]") ;;
  *) echo "WHEEL_CHECK_BACKEND must be tensorflow, torch or jax, not $backend"; exit 1 ;;
esac
# The venv gets no pip of its own: the active pip installs into it
# (`--python`), which saves ensurepip's time.
step "fresh venv" python -m venv --without-pip "$work/venv"
step "pip install ${requirements[*]##*/}" \
  python -m pip --python "$work/venv/bin/python" install -q "${requirements[@]}"

# Run from $work, which holds no keras_capsules: only the installed one imports.
cp .ci/wheel_smoke.py "$work/"
echo "=== wheel_smoke.py"
t0=$(date +%s)
(cd "$work" && TMPDIR="$work" KERAS_BACKEND=$backend TF_CPP_MIN_LOG_LEVEL=3 \
  "$work/venv/bin/python" -I wheel_smoke.py "$wheel" "$checkout")
rc=$?
echo "wheel_smoke.py: $(( $(date +%s) - t0 ))s$([ $rc -eq 0 ] || echo " FAILED (exit $rc)")"
echo "wheel check: $(( $(date +%s) - start ))s in all"
exit $rc
