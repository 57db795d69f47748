"""PointCapsuleClassifier: supervised class capsules and the paper's linear
probe on a frozen autoencoder learn generated shapes; masks, saving, mixed
precision, bad arguments."""

import keras
import numpy as np
import pytest

from keras_capsules.models import PointCapsNet, PointCapsuleClassifier
from tests.models.ready_models import READY_MODELS, point_classifier
from tests.models.test_point_capsnet import TINY, shapes
from tests.test_case import ModelTestCase, to_numpy


def autoencoder(seed=0):
    keras.utils.set_random_seed(seed)
    return PointCapsNet(**TINY)


@pytest.mark.one_backend("jax")  # what it learns: tests/test_learning.py
def test_class_capsules_learn_generated_shapes_with_the_defaults():
    model = PointCapsuleClassifier(autoencoder(), 3)
    clouds, labels = shapes(96, points=32)
    model.compile()
    history = model.fit(clouds, labels, batch_size=16, epochs=12, verbose=0).history
    assert history["loss"][-1] < 0.6 * history["loss"][0], history["loss"]
    assert history["accuracy"][-1] > 0.5, history["accuracy"]  # of 3 classes


def test_the_linear_probe_trains_on_a_frozen_autoencoder():
    encoder = autoencoder()
    model = PointCapsuleClassifier(encoder, 3, head="linear")
    encoder.trainable = False
    before = [to_numpy(w).copy() for w in encoder.weights]
    clouds, labels = shapes(96, points=32)
    model.compile()
    history = model.fit(clouds, labels, batch_size=16, epochs=10, verbose=0).history
    assert history["loss"][-1] < 0.85 * history["loss"][0], history["loss"]
    for old, new in zip(before, encoder.weights):  # statistics included
        np.testing.assert_array_equal(old, to_numpy(new))


@pytest.mark.parametrize("head", ["capsules", "linear"])
def test_padded_clouds_with_their_mask_give_the_unpadded_scores(head):
    model = PointCapsuleClassifier(autoencoder(), 3, head=head)
    clouds, _ = shapes(2, points=20)
    padded = np.concatenate([clouds, np.full((2, 5, 3), 9.0, "float32")], axis=1)
    mask = np.arange(25)[None].repeat(2, axis=0) < 20
    np.testing.assert_allclose(
        to_numpy(model(padded, mask=mask)), to_numpy(model(clouds)), rtol=1e-5, atol=1e-6
    )


class TestLinearProbe(ModelTestCase):
    def test_model_harness(self):
        """The linear head through the model harness (the capsule head:
        tests/models/test_ready_models.py)."""
        clouds, labels, shape = READY_MODELS["PointCapsuleClassifier"].data()
        run = self.run_model_test(
            point_classifier("linear"), clouds, labels, shape, batch_size=4,
            run_mixed_precision_check=False,
        )  # fmt: skip
        assert run.loaded.get_config()["head"] == "linear"


def test_mixed_precision_gives_finite_scores():
    model = PointCapsuleClassifier(autoencoder(), 3, dtype="mixed_bfloat16")
    scores = to_numpy(model(shapes(2, points=32)[0])).astype("float32")
    assert np.isfinite(scores).all() and (scores < 1).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_classes=1), "num_classes=1"),
        (dict(head="mlp"), "head"),
        (dict(head="linear", router="dynamic"), "router"),
        (dict(capsule_dim=0), "capsule_dim=0"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PointCapsuleClassifier(autoencoder(), **{"num_classes": 3, **kwargs})
    with pytest.raises(ValueError, match="PointCapsNet"):
        PointCapsuleClassifier(keras.layers.Dense(3), 3)
