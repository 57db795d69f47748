"""0.2.0's names keep working for one release, with a DeprecationWarning
that names the new one; the same object either way."""

import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.convert import escvm, heinsen
from tests.test_case import to_numpy


def test_vector_routing_num_outputs_and_output_dim():
    with pytest.warns(DeprecationWarning, match=r"num_outputs=\) is renamed num_capsules="):
        layer = kc.layers.VectorRouting(num_outputs=3, output_dim=5)
    assert (layer.num_capsules, layer.capsule_dim) == (3, 5)
    assert {"num_capsules", "capsule_dim"} <= set(layer.get_config())
    with pytest.raises(ValueError, match="Received: num_outputs=3, num_capsules=4"):
        kc.layers.VectorRouting(4, 5, num_outputs=3)


def test_heinsen_capsnet_parts():
    with pytest.warns(DeprecationWarning, match=r"HeinsenCapsNet\(parts=\) is renamed num_parts="):
        model = kc.models.HeinsenCapsNet((32, 32, 2), 3, parts=2, channels=4)
    assert model.num_parts == 2 and model.get_config()["num_parts"] == 2


def test_quaternion_classifier_capsules_and_iterations():
    sizes = dict(num_patches=8, patch_size=4, frame_neighbors=8)
    with pytest.warns(DeprecationWarning) as caught:
        model = kc.models.QuaternionCapsuleClassifier(3, capsules=2, iterations=2, **sizes)
    messages = " ".join(str(w.message) for w in caught)
    assert "renamed primary_capsules=" in messages, messages
    assert "router=QuaternionRouting(n)" in messages, messages
    assert model.primary_capsules == 2
    assert model.patch_capsules.router.iterations == 2
    assert model.class_capsules.router is not model.patch_capsules.router
    config = model.get_config()
    assert "iterations" not in config and config["router"]["config"]["iterations"] == 2
    with pytest.raises(ValueError, match="give `router` only"):
        kc.models.QuaternionCapsuleClassifier(3, iterations=2, router=kc.QuaternionRouting(2))


def test_converters_load_into():
    model = kc.models.HeinsenCapsNet((32, 32, 2), 3, num_parts=2, channels=4)
    with pytest.warns(DeprecationWarning, match="heinsen.load_into is renamed"):
        with pytest.raises(ValueError):  # the old function, called as before
            heinsen.load_into(model, {})
    assert escvm.load_into.__name__ == "load_into"
    with pytest.warns(
        DeprecationWarning, match="escvm.load_into is renamed .*load_authors_weights"
    ):
        with pytest.raises((OSError, ValueError)):
            escvm.load_into(model, "no-such-file.h5")


def test_a_config_saved_under_the_old_names_loads():
    x = np.random.default_rng(0).normal(size=(2, 6, 4)).astype("float32")
    new = kc.layers.VectorRouting(3, 5)
    config = new.get_config()
    config["num_outputs"], config["output_dim"] = (
        config.pop("num_capsules"),
        config.pop("capsule_dim"),
    )
    with pytest.warns(DeprecationWarning):
        old = kc.layers.VectorRouting.from_config(config)
    new.build(x.shape)
    old.build(x.shape)
    old.set_weights(new.get_weights())
    np.testing.assert_allclose(to_numpy(old(x)), to_numpy(new(x)))


class _OldStyleClassifier(kc.models.CapsuleClassifier):
    """A subclass written for 0.2.0: `set_capsules(digit_capsules=...)`."""

    def __init__(self, **kwargs):
        import keras

        super().__init__((12, 12, 1), 3, reconstruction=False, **kwargs)
        images = keras.Input(self.image_shape)
        children = kc.PrimaryCapsule(2, 4, 5, strides=2)(images)
        self.set_capsules(keras.Model(images, children), digit_capsules=kc.Capsule(3, 6))


def test_set_capsules_digit_capsules():
    with pytest.warns(DeprecationWarning, match=r"set_capsules\(digit_capsules=\) is renamed"):
        model = _OldStyleClassifier()
    assert model.digit_capsules is model.class_capsules
    images = np.zeros((2, 12, 12, 1), "float32")
    assert tuple(model(images).shape) == (2, 3)
    with pytest.raises(ValueError, match="Received: class_capsules=None"):
        model.set_capsules(model.features)
