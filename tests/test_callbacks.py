"""SpreadLossMarginScheduler: the margin inside compiled fits, on one and two devices."""

import contextlib
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_capsules.callbacks import SpreadLossMarginScheduler
from keras_capsules.losses import SpreadLoss
from tests.test_case import BACKEND, jit_compile_for_backend


class _RecordLoss(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def check_scheduler_in_fit(scope=None, jit_compile=None):
    """A zero-weight model: the loss of each step is exactly a function of
    the margin that step used, so a margin frozen into the compiled step
    (what happens to a loss variable under JAX) is caught. `scope`: a
    `tf.distribute` strategy scope for the model and its compilation."""
    jit_compile = jit_compile_for_backend() if jit_compile is None else jit_compile
    with scope or contextlib.nullcontext():
        model = keras.Sequential(
            [keras.Input((2,)), keras.layers.Dense(3, kernel_initializer="zeros")]
        )
        loss = SpreadLoss()
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss=loss, jit_compile=jit_compile)
    x = np.zeros((8, 2), "float32")
    y = np.eye(3, dtype="float32")[[0, 1, 2, 0, 1, 2, 0, 1]]
    scheduler = SpreadLossMarginScheduler(loss, start=0.2, end=0.8, steps=2)
    record = _RecordLoss()
    # With validation, a compiled test step runs after the epoch's logs are
    # taken: on JAX it once deleted the margin's buffer those logs held.
    history = model.fit(
        x,
        y,
        batch_size=2,
        epochs=2,
        verbose=0,
        validation_data=(x, y),
        callbacks=[scheduler, record],
    )
    # Activations are all 0, so each step's loss is 2 * margin^2; logs hold
    # the running mean over the epoch.
    margins = [0.2, 0.5, 0.8, 0.8] + [0.8] * 4
    per_step = [2 * m * m for m in margins]
    expected = [np.mean(per_step[e * 4 : e * 4 + i + 1]) for e in range(2) for i in range(4)]
    np.testing.assert_allclose(record.losses, expected, rtol=1e-5)
    assert history.history["margin"] == pytest.approx([0.8, 0.8])
    assert all(type(m) is float for m in history.history["margin"])


def test_scheduler_changes_the_loss_inside_the_compiled_train_step():
    check_scheduler_in_fit()


DATA_PARALLEL = """
import sys
try:
    import torch  # noqa: F401  (before tensorflow: see conftest)
except ImportError:
    pass
if sys.argv[1] == "tensorflow":
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    scope = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope()
else:
    import keras
    devices = keras.distribution.list_devices()
    assert len(devices) == 2, devices
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    scope = None
from tests.test_callbacks import check_scheduler_in_fit
from tests.test_case import jit_compile_for_backend
# TF: no XLA on mirrored variables.
check_scheduler_in_fit(scope, jit_compile=jit_compile_for_backend(xla_on_tensorflow=False))
"""


@pytest.mark.skipif(BACKEND == "torch", reason="torch has no data-parallel trainer here")
def test_scheduler_on_two_data_parallel_cpu_devices():
    """MirroredStrategy once gave each replica margin / 2 (a sum-aggregated
    metric variable); DataParallel on JAX once failed on a metric added after
    the train function's shardings were fixed."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(
        os.environ,
        PYTHONPATH=root,
        KERAS_BACKEND=BACKEND,
        XLA_FLAGS=os.environ["XLA_FLAGS"] + " --xla_force_host_platform_device_count=2",
    )
    result = subprocess.run(
        [sys.executable, "-c", DATA_PARALLEL, BACKEND],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_scheduler_margins_and_errors():
    scheduler = SpreadLossMarginScheduler(SpreadLoss(), start=0.2, end=0.9, steps=7)
    assert scheduler.margin_at(0) == pytest.approx(0.2)
    assert scheduler.margin_at(7) == pytest.approx(0.9)
    assert scheduler.margin_at(100) == pytest.approx(0.9)
    assert scheduler.margin_at(3.5) == pytest.approx(0.55)
    with pytest.raises(ValueError, match="steps=0"):
        SpreadLossMarginScheduler(SpreadLoss(), steps=0)
    with pytest.raises(ValueError, match="loss="):
        SpreadLossMarginScheduler("spread", steps=3)
    with pytest.raises(ValueError, match="margin=0"):
        SpreadLoss(margin=0)
