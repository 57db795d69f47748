"""Long runs lose nothing: seeded data order, --resume after a SIGKILL, a
NaN batch that stops the run with its step, damaged backups."""

import json
import os
import signal

import keras
import numpy as np
import pytest

from tests.conftest import BACKEND
from tests.examples.test_scripts import (
    EXAMPLES,
    ROOT,
    example,
    run_script,
    same_on_every_backend,
    tiny_run,
)

# tests/examples/resume_worker.py: a tiny model on generated data, 6 steps per epoch.
WORKER = os.path.join(ROOT, "tests", "examples", "resume_worker.py")
RUN = ["--epochs", "3", "--seed", "3", "--validation-fraction", "0"]


def at_step(step, action):
    """Code to run before an example: `action` (Python statements) runs at
    the end of its training step number `step` (counted over all epochs)."""
    body = "\n".join("        " + line for line in action.strip().splitlines())
    return f"""
import os, shutil, signal, sys
sys.path.insert(0, {EXAMPLES!r})
import common
_steps = [0]
_on_batch_end = common.StepLog.on_train_batch_end
def _at_step(self, batch, logs=None):
    _on_batch_end(self, batch, logs)
    _steps[0] += 1
    if _steps[0] == {step}:
{body}
common.StepLog.on_train_batch_end = _at_step
"""


# A real SIGKILL of the process.
KILL = "os.kill(os.getpid(), signal.SIGKILL)"


def _weights(path):
    model = keras.saving.load_model(path, safe_mode=True)
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


def _read(path):
    with open(path) as f:
        return f.read()


def test_a_run_killed_mid_epoch_resumes_to_the_uninterrupted_weights(tmp_path):
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    # Step 8 is the second batch of epoch 2: the backup holds epoch 1.
    prelude = at_step(8, KILL)
    result = run_script([WORKER, str(killed), *RUN], {}, prelude=prelude)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    state = example("backup").read(str(killed / "backup.npz"))
    assert state.epochs_done == 1 and state.seed == 3 and len(state.log_rows) == 1
    assert len(_read(killed / "training_log.csv").splitlines()) == 2  # header, epoch 1

    result = run_script([WORKER, str(killed), *RUN, "--resume"], {})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Resumed from" in result.stdout and "1 of 3 epochs done" in result.stdout
    assert not (killed / "backup.npz").exists()  # finished: nothing to resume
    # The same run without a kill (here: this process runs it).
    from tests.examples import resume_worker

    resume_worker.main(str(straight), *RUN)

    for a, b in zip(_weights(killed / "model.keras"), _weights(straight / "model.keras")):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    log = _read(killed / "training_log.csv")
    assert log == _read(straight / "training_log.csv") and len(log.splitlines()) == 4


NAN_RUN = ["--epochs", "3", "--steps-per-epoch", "2", "--validation-fraction", "0"]
if BACKEND == "tensorflow":  # control flow, not numerics: XLA's compiles cost seconds
    NAN_RUN += ["--jit-compile", "false"]


def _nan_at(step, steps_per_epoch=2, epochs=3):
    """load_data of tiny_run's shapes: `epochs` epochs of batches of 4 in one
    dataset, the batch number `step` (from 0) with a NaN pixel (`None`: none)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    count = 4 * steps_per_epoch * epochs
    images = rng.uniform(size=(count, 6, 6, 3)).astype("float32")
    if step is not None:
        images[4 * step, 0, 0, 0] = np.nan
    labels = rng.integers(0, 3, count)

    def load_data(args, batch_size, drop_remainder=False):
        train = tf.data.Dataset.from_tensor_slices((images, labels)).batch(4)
        test = tf.data.Dataset.from_tensor_slices((images[:4], labels[:4])).batch(4)
        return train, None, test

    return load_data


def test_a_nan_batch_stops_at_its_step_and_keeps_the_last_good_backup(tmp_path):
    flags = NAN_RUN
    with pytest.raises(SystemExit, match=r"step 4 of this run \(epoch 2, batch 2\)") as stop:
        tiny_run(tmp_path, *flags, load_data=_nan_at(3))
    assert "backup.npz" in str(stop.value) and "after epoch 1" in str(stop.value)
    backup = example("backup")
    state = backup.read(str(tmp_path / "backup.npz"))
    assert state.epochs_done == 1 and not (tmp_path / "model.keras").exists()
    assert all(np.all(np.isfinite(v)) for v in state.variables[1])
    # With the bad batch gone, --resume goes on from the backup to the end.
    metrics = tiny_run(tmp_path, *flags, "--resume", load_data=_nan_at(None, epochs=4))
    assert metrics["resumed_at_epoch"] == 1 and np.isfinite(metrics["test_loss"])


def _backed_up(output_dir, *flags):
    """A tiny run that a NaN in epoch 2 stops: its backup holds epoch 1."""
    with pytest.raises(SystemExit, match="step 3 of this run"):
        tiny_run(output_dir, *NAN_RUN, *flags, load_data=_nan_at(2))
    return output_dir / "backup.npz"


@same_on_every_backend
def test_damaged_backups_are_refused_with_the_files_name(tmp_path):
    backup = example("backup")
    path = tmp_path / "backup.npz"
    good = _backed_up(tmp_path / "good").read_bytes()
    for damaged in (b"not a backup", good[: len(good) // 2]):
        path.write_bytes(damaged)
        with pytest.raises(ValueError, match=f"{path} is not a usable training backup"):
            backup.read(str(path))
        with pytest.raises(SystemExit, match="not a usable training backup"):
            tiny_run(tmp_path, "--resume")
    np.savez(path, header=np.array('{"format": "another/1"}'))
    with pytest.raises(ValueError, match="its header is not"):
        backup.read(str(path))
    # A backup of another model: refused before any training.
    path.write_bytes(good)
    state = backup.read(str(path))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    with pytest.raises(ValueError, match="backs up another model"):
        backup.restore(model, state)


@same_on_every_backend
def test_resume_refuses_another_seed_and_skips_a_finished_run(tmp_path):
    _backed_up(tmp_path, "--seed", "5")
    with pytest.raises(SystemExit, match="--seed 5. Received: --seed 6"):
        tiny_run(tmp_path, *NAN_RUN, "--seed", "6", "--resume", load_data=_nan_at(None, epochs=4))
    finished = tiny_run(tmp_path, *NAN_RUN, "--resume", load_data=_nan_at(None, epochs=4))
    assert finished["resumed_at_epoch"] == 1 and finished["seed"] == 5
    again = tiny_run(tmp_path, *NAN_RUN, "--resume", load_data=_nan_at(None, epochs=4))
    assert again == json.loads(json.dumps(finished))  # not trained again


# ---- data order: each loader's epoch is a function of (seed, epoch) ----------


def _batches(dataset):
    import tensorflow as tf

    return [tf.nest.map_structure(np.asarray, batch) for batch in dataset]


def _assert_same(a, b):
    import tensorflow as tf

    assert len(a) == len(b)
    for x, y in zip(a, b):
        tf.nest.map_structure(np.testing.assert_array_equal, x, y)


def _differ(a, b):
    import tensorflow as tf

    return any(
        not np.array_equal(p, q)
        for x, y in zip(a, b)
        for p, q in zip(tf.nest.flatten(x), tf.nest.flatten(y))
    )


LOADERS = {
    # name -> (TFDS dataset mocked, loader(order) -> training batches)
    "mnist_capsnet": lambda data, order: data.mnist("train", 4, "capsnet", order=order),
    "mnist_efficient_capsnet": lambda data, order: data.mnist(
        "train", 4, "efficient_capsnet", order=order
    ),
    "smallnorb_hinton": lambda data, order: data.smallnorb("train", 4, order=order),
    "smallnorb_efficient_capsnet": lambda data, order: data.smallnorb(
        "train", 4, recipe="efficient_capsnet", order=order
    ),
    "smallnorb_heinsen": lambda data, order: data.smallnorb(
        "train", 4, recipe="heinsen", order=order
    ),
    "smallnorb_azimuth": lambda data, order: data.smallnorb(
        "train", 4, viewpoints=("azimuth", True), order=order
    ),
    "multimnist": lambda data, order: data.multimnist("train", 4, order=order),
    "cifar10": lambda data, order: data.cifar10("train", 4, image_size=16, order=order),
    "digit_canvases": lambda data, order: data.digit_canvases(
        "train", 4, canvas_size=32, order=order
    ),
    "oxford_pets": lambda data, order: data.oxford_pets_segmentation(
        "train", 4, image_size=16, order=order
    ),
}


@same_on_every_backend
@pytest.mark.parametrize("name", LOADERS)
def test_each_training_epoch_is_a_function_of_the_seed_and_epoch(name):
    data = example("data")
    load = LOADERS[name]
    with data.mock_data(24):
        three = _batches(load(data, data.EpochOrder(7, 0, 3)))
        again = _batches(load(data, data.EpochOrder(7, 0, 3)))
        resumed = _batches(load(data, data.EpochOrder(7, 2, 1)))
        other = _batches(load(data, data.EpochOrder(8, 2, 1)))
    per_epoch = len(three) // 3
    assert per_epoch >= 1 and len(resumed) == per_epoch
    _assert_same(three, again)  # the same seed: the same batches
    _assert_same(three[2 * per_epoch :], resumed)  # epoch 2 alone, as in the run
    assert _differ(three[:per_epoch], three[per_epoch : 2 * per_epoch])  # new each epoch
    assert _differ(resumed, other)  # another seed


@same_on_every_backend
def test_training_batches_count_the_steps_of_each_epoch():
    import tensorflow as tf

    data = example("data")
    examples = tf.data.Dataset.range(10)
    tf.random.set_seed(0)  # a global seed of 0 once broke Dataset.shuffle's tensor seeds
    batches = data.training_batches(examples, 4, data.EpochOrder(0, 1, 3))
    assert data.batches_per_epoch(batches) == 3 and int(batches.cardinality()) == 9
    limited = data.training_batches(examples, 4, data.EpochOrder(0, 0, 2, steps_per_epoch=2))
    assert data.batches_per_epoch(limited) == 2 and len(_batches(limited)) == 4
    # A filter hides the count: it is counted.
    odd = data.training_batches(examples.filter(lambda x: x % 2 == 1), 2, data.EpochOrder(0, 0, 2))
    assert data.batches_per_epoch(odd) == 3
    epoch = sorted(np.concatenate(_batches(odd)[:3]).tolist())
    assert epoch == [1, 3, 5, 7, 9]  # each epoch shuffles all the examples
    assert data.batches_per_epoch(examples) is None
