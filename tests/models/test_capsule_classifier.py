"""CapsuleClassifier, the base of CapsNet, EfficientCapsNet and
CapsuleImageClassifier: the loss added in compute_loss, reconstruction,
routing coefficients, argument checks. Fit, save/load and the dtype policy
of each ready model: the model harness in its own file (tests/test_case.py,
`ModelTestCase.run_model_test`); the CapsuleModel contract:
tests/models/test_capsule_model.py."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.models import CapsNet, CapsuleClassifier, EfficientCapsNet
from tests.models.builders import batch, expected_loss, tiny_capsnet
from tests.reference import attention as ref
from tests.reference.dynamic import capsule_votes, dynamic_routing
from tests.test_case import jit_compile_for_backend, to_numpy


def test_old_config_without_dtype_loads():
    model = tiny_capsnet()
    config = model.get_config()
    del config["dtype"]  # configs saved before the policy was kept
    restored = CapsNet.from_config(config)
    assert restored.dtype_policy.name == "float32"
    assert restored.count_params() == model.count_params()


def test_loss_is_margin_plus_weighted_reconstruction():
    model = tiny_capsnet(reconstruction_weight=0.5)
    model.compile(optimizer="adam", jit_compile=jit_compile_for_backend())
    images, labels = batch(model.image_shape)
    one_hot = np.eye(3, dtype="float32")[labels]
    # Integer and one-hot labels give the same loss.
    losses = [
        model.evaluate(images, y, batch_size=8, verbose=0, return_dict=True)["loss"]
        for y in (labels, one_hot)
    ]
    np.testing.assert_allclose(losses, [expected_loss(model, images, labels)] * 2, rtol=1e-4)
    assert not hasattr(tiny_capsnet(reconstruction=False), "decoder")


def test_reconstruct_masks_by_label_or_longest_capsule():
    model = tiny_capsnet()
    images, labels = batch(model.image_shape)
    poses = keras.ops.convert_to_numpy(model.encode(images))
    for given in (labels, None):
        chosen = labels if given is not None else np.linalg.norm(poses, axis=-1).argmax(-1)
        masked = poses * np.eye(3)[chosen][..., None]
        expected = keras.ops.convert_to_numpy(model.decode(masked))
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(model.reconstruct(images, given)),
            expected,
            rtol=1e-5,
            atol=1e-6,
        )


def test_routing_coefficients_are_a_distribution_over_classes():
    model = tiny_capsnet()
    images, _ = batch(model.image_shape, n=2)
    c = keras.ops.convert_to_numpy(model.routing_coefficients(images))
    assert c.shape == (2, 2 * 2 * 2, 3)
    np.testing.assert_allclose(c.sum(-1), 1.0, rtol=1e-5)


def test_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match="reconstruction_weight=-1"):
        tiny_capsnet(reconstruction_weight=-1)
    with pytest.raises(ValueError, match="reconstruction_weight=nan"):
        tiny_capsnet(reconstruction_weight=float("nan"))
    with pytest.raises(ValueError, match="decoder_units=8"):
        tiny_capsnet(decoder_units=8)
    with pytest.raises(ValueError, match="num_classes"):
        CapsNet(num_classes=0)
    with pytest.raises(ValueError, match="router"):
        CapsNet(router="dynamo")
    with pytest.raises(ValueError, match="input_shape"):
        EfficientCapsNet(input_shape=(28, 28))


@pytest.mark.parametrize("other_batch", [8, 4])
def test_compute_loss_uses_the_poses_of_its_own_images(other_batch):
    # Issue 12: a `predict` between the forward pass and `compute_loss` used
    # to hand its own poses to the loss (a wrong loss, a shape error, or on
    # TensorFlow a graph tensor out of scope).
    model = tiny_capsnet()
    # Poses of norm ~1 (not ~1e-7) and a decoder that they move: then
    # other poses change the loss by ~5%.
    for variable, scale in (
        (model.features.get_layer("primary").kernel, 10.0),
        (model.class_capsules.kernel, 300.0),
        (model.decoder.layers[0].kernel, 10.0),
        (model.decoder.layers[1].kernel, 10.0),
    ):
        variable.assign(variable * scale)
    model.compile(optimizer="adam")
    xb, yb = batch(model.image_shape, n=8)
    xa = np.zeros((other_batch, *model.image_shape), "float32")
    y_pred = model(xb)
    model.predict(xa, verbose=0)
    loss = model.compute_loss(xb, yb, y_pred)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loss), expected_loss(model, xb, yb), rtol=1e-5
    )
    # Without the images the poses cannot be recomputed: a clear error.
    with pytest.raises(ValueError, match="Received: x=None"):
        model.compute_loss(None, yb, y_pred)


def test_class_capsules_layer_is_named_as_the_attribute():
    models = [
        kc.CapsNet(
            (20, 20, 1),
            3,
            conv_filters=4,
            primary_capsules=2,
            primary_dim=4,
            capsule_dim=4,
            decoder_units=(8,),
        ),
        kc.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,)),
    ]
    for model in models:
        assert model.class_capsules.name == "class_capsules"
        # The 0.2.0 name is the same layer, counted once.
        assert model.digit_capsules is model.class_capsules
        assert sum(layer is model.class_capsules for layer in model.layers) == 1
        assert len({id(w) for w in model.weights}) == len(model.weights)


class OrthogonalCapsNet(CapsuleClassifier):
    """A tiny classifier whose class capsules are orthogonal."""

    def __init__(self, **kwargs):
        super().__init__((12, 12, 1), 3, reconstruction=False, **kwargs)
        images = keras.Input(self.image_shape)
        children = kc.PrimaryCapsule(2, 4, 5, strides=2)(images)
        self.features = keras.Model(images, children)
        self.class_capsules = kc.Capsule(3, 6, orthogonal=True, name="class_capsules")
        self.class_capsules.build(children.shape)
        self.build((None, *self.image_shape))


def test_routing_coefficients_of_orthogonal_capsules():
    model = OrthogonalCapsNet()
    images = np.random.default_rng(1).uniform(size=(2, 12, 12, 1)).astype("float32")
    children = to_numpy(model.features(images)).astype("float64")
    transforms = ref.householder_orthogonal(
        to_numpy(model.class_capsules.householder).astype("float64"), 4, 6
    )
    expected = dynamic_routing(capsule_votes(children, transforms))[2]
    c = to_numpy(model.routing_coefficients(images))
    assert c.shape == (2, 4 * 4 * 2, 3)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-6)


def test_decoding_without_a_decoder_says_so():
    model = tiny_capsnet(reconstruction=False)
    images, _ = batch(model.image_shape, n=2)
    for call in (lambda: model.reconstruct(images), lambda: model.decode(np.zeros((2, 3, 4)))):
        with pytest.raises(ValueError, match="Received: reconstruction=False"):
            call()
