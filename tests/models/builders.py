"""Tiny ready models, batches, and the classifiers' reference loss, for the
model tests (tests/test_export.py builds the same sizes, so that JAX finds
their initializers in its compilation cache)."""

import keras
import numpy as np

from keras_capsules.models import CapsNet, EfficientCapsNet, MatrixCapsNet


def tiny_capsnet(**kwargs):
    kwargs = {"decoder_units": (8,), **kwargs}
    return CapsNet(
        (20, 20, 1), 3, conv_filters=8, primary_capsules=2, primary_dim=4, capsule_dim=4, **kwargs
    )


def tiny_efficient(**kwargs):
    return EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,), **kwargs)


def batch(shape, classes=3, n=8, seed=0):
    """`n` images of `shape`, uniform in [0, 1), and class ids."""
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(n, *shape)).astype("float32"), rng.integers(0, classes, n)


def expected_loss(model, images, labels):
    """A `CapsuleClassifier`'s loss in NumPy: the margin loss of the scores
    + weight * MSE of the label-masked reconstruction."""
    one_hot = np.eye(model.num_classes, dtype="float32")[labels]
    scores = keras.ops.convert_to_numpy(model(images))
    margin = (
        (
            one_hot * np.maximum(0.9 - scores, 0) ** 2
            + 0.5 * (1 - one_hot) * np.maximum(scores - 0.1, 0) ** 2
        )
        .sum(-1)
        .mean()
    )
    decoded = keras.ops.convert_to_numpy(model.reconstruct(images, labels))
    return margin + model.reconstruction_weight * ((decoded - images) ** 2).mean()


# One EM iteration keeps XLA compilation short; the layer tests route with 2.
ONE_EM_ITERATION = {"class_name": "em", "config": {"iterations": 1}}
TINY_MATRIX = dict(
    conv_filters=4, primary_capsules=2, conv_capsules1=2, conv_capsules2=2, router=ONE_EM_ITERATION
)


def tiny_matrix_capsnet(**kwargs):
    return MatrixCapsNet(**{**TINY_MATRIX, **kwargs})
