"""The example scripts: --smoke end to end, --distribute, the data pipelines."""

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import BACKEND, real_mnist_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
OUTPUTS = ["training_log.csv", "metrics.json", "model.keras", "training_curves.png"]
CAPSULE_FIGURES = ["reconstructions.png", "perturbations.png", "routing.png"]
# script -> (extra flags of its smoke run, extra outputs)
SCRIPTS = {
    "mnist_capsnet": ([], CAPSULE_FIGURES),
    "mnist_efficient_capsnet": ([], CAPSULE_FIGURES),
    "smallnorb_efficient_capsnet": ([], CAPSULE_FIGURES),
    # EM routing on the full-size net takes minutes per step here; the
    # paper's sizes are tested by test_matrix_capsnet.py's parameter count.
    "smallnorb_matrix_capsnet": (["--capsules", "4", "2", "2", "2", "--iterations", "1"], []),
}


def example(name):
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    return importlib.import_module(name)


def read_metrics(output_dir):
    with open(os.path.join(output_dir, "metrics.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("name", SCRIPTS)
def test_smoke_run_writes_every_output(name, tmp_path):
    # XLA-compiling the full-size models costs minutes on TF; every layer's
    # XLA train step is covered by its own test.
    jit = ["--jit-compile", "false"] if BACKEND == "tensorflow" else []
    flags, figures = SCRIPTS[name]
    metrics = example(name).main(["--smoke", "--output-dir", str(tmp_path), *jit, *flags])
    for output in OUTPUTS + figures:
        assert (tmp_path / output).stat().st_size > 0, output
    assert read_metrics(tmp_path) == json.loads(json.dumps(metrics))
    assert metrics["backend"] == BACKEND and metrics["steps_per_epoch"] == 2
    assert np.isfinite(metrics["test_loss"]) and 0 <= metrics["test_accuracy"] <= 1
    assert metrics["parameters"] > 0 and metrics["images_per_second"] > 0


def run_script(args, env_extra, prelude=""):
    """Runs an example in a fresh interpreter (device flags must precede imports)."""
    env = dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND=BACKEND, **env_extra)
    code = (
        "import sys, runpy\n" + prelude
        + f"sys.argv = {args!r}\nsys.path.insert(0, {EXAMPLES!r})\n"
        + "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


TF_TWO_CPUS = """
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
"""


@pytest.mark.skipif(BACKEND == "torch", reason="torch: one process per device (torchrun), "
                    "tests/test_distributed.py")
def test_distribute_on_two_virtual_cpu_devices(tmp_path):
    script = os.path.join(EXAMPLES, "mnist_efficient_capsnet.py")
    args = [script, "--smoke", "--distribute", "--output-dir", str(tmp_path)]
    if BACKEND == "tensorflow":
        args += ["--jit-compile", "false"]  # see test_smoke_run_writes_every_output
    if BACKEND == "jax":
        result = run_script(args, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    else:
        result = run_script(args, {}, prelude="import keras\n" + TF_TWO_CPUS)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = read_metrics(tmp_path)
    assert metrics["replicas"] == 2 and metrics["distribute"]
    assert np.isfinite(metrics["test_loss"])


@pytest.mark.skipif(BACKEND != "torch", reason="the torch message only")
def test_distribute_on_torch_without_torchrun_says_how_to_launch(tmp_path, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match="torchrun --nproc_per_node=2"):
        example("mnist_capsnet").main(["--smoke", "--distribute", "--output-dir", str(tmp_path)])


def test_missing_dataset_error_names_tfds_data_dir(tmp_path):
    data = example("data")
    with pytest.raises(data.DatasetUnavailableError, match="TFDS_DATA_DIR"):
        data.mnist("train", 4, data_dir=str(tmp_path), download=False)


def test_router_flag_lists_library_routers():
    routers = example("common").router_names()
    assert {"dynamic", "self_attention"} <= set(routers)


@pytest.mark.real_mnist
@pytest.mark.skipif(real_mnist_dir() is None,
                    reason="real MNIST not prepared: run examples/prepare_mnist_offline.py NPZ DIR "
                    "and set TFDS_DATA_DIR=DIR")
@pytest.mark.parametrize("augment", [None, "capsnet", "efficient_capsnet"])
def test_real_mnist_pipeline(augment):
    data = example("data")
    images, labels = next(iter(data.mnist("train", 256, augment, real_mnist_dir())))
    images, labels = np.asarray(images), np.asarray(labels)
    assert images.shape == (256, 28, 28, 1) and images.dtype == np.float32
    assert images.min() >= 0 and images.max() <= 1 and images.max() > 0.9
    assert set(np.unique(labels)) == set(range(10))
    # Shifts keep the digit's ink (MNIST digits sit 4 px from the border).
    if augment == "capsnet":
        assert np.all(images.reshape(256, -1).sum(-1) > 20)
    test_images, _ = next(iter(data.mnist("test", 10_000, None, real_mnist_dir())))
    assert test_images.shape[0] == 10_000


def test_jit_compile_flag():
    resolve = example("common").resolve_jit_compile
    assert resolve("true") is True and resolve("false") is False
    assert resolve("auto", "torch") is False  # eager unless the model says compiled is faster
    # torch.compile only for models that measured faster compiled, on runs long
    # enough to repay the compile (the smoke runs stay eager).
    images = example("common").TORCH_COMPILE_MIN_IMAGES
    assert resolve("auto", "torch", torch_compile=True, train_images=images) is True
    assert resolve("auto", "torch", torch_compile=True, train_images=images - 1) is False
    assert resolve("auto", "torch", torch_compile=False, train_images=10 * images) is False
    assert resolve("auto", "jax") == resolve("auto", "tensorflow") == "auto"
    assert resolve("auto", "tensorflow", xla_on_cpu=True) is True
    assert resolve("false", "tensorflow", xla_on_cpu=True) is False
