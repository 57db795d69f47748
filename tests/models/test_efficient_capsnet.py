"""EfficientCapsNet: the model harness, the paper's size, mixed precision,
the smallNORB architecture. Its DepthwisePrimaryCapsule layer:
tests/layers/test_depthwise_primary_capsule.py."""

import os

import keras
import numpy as np
import pytest

from keras_capsules.models import EfficientCapsNet
from tests.conftest import authors_weights
from tests.models.builders import batch, tiny_efficient
from tests.test_case import ModelTestCase, jit_compile_for_backend, round_trip, to_numpy


class TestEfficientCapsNet(ModelTestCase):
    def test_model(self):
        images, labels = batch((16, 16, 1))
        run = self.run_model_test(
            tiny_efficient,
            images,
            labels,
            (8, 3),
            batch_size=4,
            epochs=3,
            same_outputs=lambda model: model.reconstruct(images, labels),
        )
        losses = run.history["loss"]
        assert losses[-1] < losses[0], losses
        # The reconstruction term reaches the decoder through compute_loss.
        for w in run.model.decoder.weights:
            assert np.abs(to_numpy(w) - run.initial(w)).max() > 0, w.path


def test_efficient_capsnet_paper_parameter_count():
    model = EfficientCapsNet()
    assert model.count_encoder_params() == 161_824  # The paper's count.
    assert model.count_params() == 161_824 + 576 + 1_411_344  # + BN stats + decoder.


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_fit_has_finite_loss(policy):
    keras.config.set_dtype_policy(policy)
    model = tiny_efficient()
    # Jitted on JAX (op by op takes 3x longer there: 52 s against 17 s);
    # TensorFlow without XLA, the path its examples take (XLA + mixed: layer tests).
    model.compile(optimizer="adam", jit_compile=jit_compile_for_backend(xla_on_tensorflow=False))
    images, labels = batch(model.image_shape)
    loss = model.fit(images, labels, batch_size=4, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss))


# ------------------------------------------------- the smallNORB architecture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AUTHORS_WEIGHTS, needs_authors_weights = authors_weights("escvm_efficient_capsnet_SMALLNORB.h5")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "escvm_efficient_capsnet_smallnorb.npz")


def test_smallnorb_architecture_is_the_authors():
    model = EfficientCapsNet(architecture="smallnorb")
    assert model.image_shape == (48, 48, 2) and model.num_classes == 5
    assert model.decoder_units == (64, 128, 128)
    # Their model's trainable weights without the generator (instance norms' included).
    assert model.count_encoder_params() == 151_664
    assert model.count_params() == 151_664 + 229_570  # + the generator
    assert model.decoder.compute_output_shape((None, 80)) == (None, 48, 48, 2)
    assert tuple(model.features.output.shape) == (None, 16, 8)


def test_config_without_architecture_is_the_mnist_model():
    config = tiny_efficient().get_config()
    assert config["architecture"] == "mnist"
    old = {k: v for k, v in config.items() if k != "architecture"}  # saved before it existed
    assert EfficientCapsNet.from_config(old).get_config() == config


# The smallNORB architecture is built of the same layers as the MNIST one,
# whose harness runs on every backend.
@pytest.mark.one_backend("jax")
def test_smallnorb_architecture_fits_and_round_trips():
    model = EfficientCapsNet((24, 24, 2), 3, architecture="smallnorb")
    model.compile(jit_compile=jit_compile_for_backend(xla_on_tensorflow=False))
    images, labels = batch(model.image_shape)
    loss = model.fit(images, labels, batch_size=8, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss))
    loaded = round_trip(model)
    assert loaded.get_config() == model.get_config()
    for a, b in zip(loaded.weights, model.weights):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=b.path)
    # Compiled (predict): an eager first call on JAX costs seconds, op by op.
    np.testing.assert_allclose(
        loaded.predict(images, verbose=0), model.predict(images, verbose=0), atol=1e-6
    )


def test_smallnorb_architecture_refuses_small_images():
    with pytest.raises(ValueError, match="at least 24x24"):
        EfficientCapsNet((20, 20, 2), 5, architecture="smallnorb")
    with pytest.raises(ValueError, match="multiples of 8"):
        EfficientCapsNet((28, 28, 2), 5, architecture="smallnorb")
    with pytest.raises(ValueError, match="architecture"):
        EfficientCapsNet(architecture="cifar")


@needs_authors_weights
def test_authors_weights_give_the_float64_reference():
    """The released weights in our model give what the authors' layers give,
    computed in float64 NumPy (tests/fixtures/README.md)."""
    expected = np.load(FIXTURE)
    model = EfficientCapsNet(architecture="smallnorb")
    model.load_authors_weights(AUTHORS_WEIGHTS)
    # One compiled pass (predict) for the scores, poses and argmax-masked reconstruction.
    images = keras.Input((48, 48, 2))
    poses = model.class_capsules(model.features(images))
    probe = keras.Model(images, [model.scores(poses), poses, model.decoder(model.mask(poses))])
    outputs = probe.predict(expected["images"], verbose=0)
    for name, value in zip(["scores", "poses", "reconstruction"], outputs):
        reference = expected[name]
        error = np.abs(value - reference).max() / np.abs(reference).max()
        assert error < 1e-4, (name, error)
    np.testing.assert_array_equal(outputs[0].argmax(1), expected["scores"].argmax(1))
