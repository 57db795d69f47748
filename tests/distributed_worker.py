"""One process of tests/test_distributed.py (run as a script, one per process).

Trains the small models of `MODELS` for `STEPS` SGD steps on one fixed
global batch with `keras_capsules.distribute`, and saves each model's
initial and final weights (and the spread-loss margin) to `OUT/NAME.npz`.

Each process gets the global batch with the rows of the other processes'
slices replaced by noise: only when the engine gives each process its own
slice and averages the gradients over all processes do the final weights
equal one process trained on the clean batch.

`OUT --until-killed` trains the capsule model without end instead, and
writes `OUT/started.<process id>` (its OS pid) after its first step: the
fail-fast test kills one process then.
"""

import os
import sys

if os.environ.get("KERAS_BACKEND") == "torch":
    import torch  # noqa: F401  (before tensorflow: see tests/conftest.py)

import keras
import numpy as np
import tensorflow as tf

import keras_capsules as kc
from keras_capsules import distribute

BATCH, STEPS, LEARNING_RATE = 8, 3, 0.1
MARGIN_STEPS = 4


def capsule_model():
    """A functional `Capsule` with `DynamicRouting`: (6, 4) children -> 3 classes."""
    inputs = keras.Input((6, 4))
    poses = kc.Capsule(3, 4, router=kc.DynamicRouting(iterations=3))(inputs)
    model = keras.Model(inputs, kc.Length()(poses))
    return model, kc.MarginLoss()


def efficient_capsnet():
    model = kc.EfficientCapsNet((12, 12, 1), 3, decoder_units=(16,))
    # BatchNormalization statistics are per process on torch and per replica
    # on TensorFlow: in inference mode the step is the same as on one process.
    for layer in model.features.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.trainable = False
    return model, None


def matrix_capsnet():
    model = kc.MatrixCapsNet(
        (24, 24, 1),
        3,
        conv_filters=4,
        primary_capsules=2,
        conv_capsules1=2,
        conv_capsules2=2,
        router={"class_name": "em", "config": {"iterations": 1}},
    )
    return model, None


MODELS = {
    "capsule": capsule_model,
    "efficient_capsnet": efficient_capsnet,
    "matrix_capsnet": matrix_capsnet,
}


def global_batch(name):
    """The fixed (inputs, class ids) global batch of a model."""
    rng = np.random.default_rng(0)
    shape = {"capsule": (6, 4), "efficient_capsnet": (12, 12, 1), "matrix_capsnet": (24, 24, 1)}[
        name
    ]
    inputs = rng.uniform(0, 1, (BATCH, *shape)).astype("float32")
    return inputs, np.arange(BATCH) % 3


def noisy_batch(name, process_id, num_processes):
    """The global batch, with every row outside this process's slice replaced."""
    inputs, labels = global_batch(name)
    size = BATCH // num_processes
    other = np.ones(BATCH, bool)
    other[process_id * size : (process_id + 1) * size] = False
    rng = np.random.default_rng(100 + process_id)
    inputs[other] = rng.normal(5, 3, inputs[other].shape)
    labels[other] = (labels[other] + 1) % 3
    return inputs, labels


def build(name):
    model, loss = MODELS[name]()
    model.compile(
        optimizer=keras.optimizers.SGD(LEARNING_RATE),
        loss=loss,
        jit_compile=keras.backend.backend() == "jax",
    )
    callbacks = []
    if name == "matrix_capsnet":
        callbacks.append(
            kc.callbacks.SpreadLossMarginScheduler(
                model.spread_loss, start=0.2, end=0.9, steps=MARGIN_STEPS
            )
        )
    return model, callbacks


def labels_for(model, labels):
    if isinstance(model, kc.models.CapsuleClassifier) or isinstance(model, kc.MatrixCapsNet):
        return labels
    return np.eye(3, dtype="float32")[labels]  # MarginLoss wants one-hot.


def train(model, callbacks, inputs, labels, steps=STEPS):
    dataset = tf.data.Dataset.from_tensor_slices((inputs, labels_for(model, labels)))
    dataset = dataset.batch(BATCH).repeat()
    history = distribute.fit(
        model, dataset, epochs=1, steps_per_epoch=steps, callbacks=callbacks, verbose=0
    )
    return history


def weights(model):
    return [keras.ops.convert_to_numpy(v) for v in model.weights]


class MarkStarted(keras.callbacks.Callback):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            with open(self.path + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(self.path + ".tmp", self.path)


def train_until_killed(out_dir):
    # Detection within the test's minute: JAX's survivors wait this long.
    with distribute.scope(heartbeat_timeout_s=10) as cluster:
        model, _ = build("capsule")
        started = MarkStarted(os.path.join(out_dir, f"started.{cluster.process_id}"))
        train(model, [started], *global_batch("capsule"), steps=10**9)


def main(out_dir, names):
    keras.config.disable_traceback_filtering()
    if names == ["--until-killed"]:
        return train_until_killed(out_dir)
    with distribute.scope() as cluster:
        # Each process offers its own value; all must get process 0's.
        chief_value = cluster.chief_value(100 + cluster.process_id)
        for name in names:
            keras.utils.set_random_seed(0)
            model, callbacks = build(name)
            initial = weights(model)
            inputs, labels = noisy_batch(name, cluster.process_id, cluster.num_processes)
            train(model, callbacks, inputs, labels)
            margin = (
                float(keras.ops.convert_to_numpy(model.spread_loss.margin))
                if name == "matrix_capsnet"
                else np.nan
            )
            np.savez(
                os.path.join(out_dir, f"{name}.{cluster.process_id}.npz"),
                *initial,
                *weights(model),
                num_processes=cluster.num_processes,
                replicas=cluster.replicas,
                margin=margin,
                chief_value=chief_value,
                count=len(initial),
            )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
