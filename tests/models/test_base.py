"""CapsuleClassifier, the base of CapsNet and EfficientCapsNet: the loss added in
compute_loss, reconstruction, routing coefficients, fit and saving, argument checks."""

import os
import tempfile
import warnings

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.models import CapsNet, CapsuleClassifier, EfficientCapsNet
from tests.reference import attention as ref
from tests.reference.dynamic import capsule_votes, dynamic_routing
from tests.test_case import BACKEND, jit_compile_for_backend, to_numpy


def tiny_capsnet(**kwargs):
    kwargs = {"decoder_units": (8,), **kwargs}
    return CapsNet(
        (20, 20, 1), 3, conv_filters=8, primary_capsules=2, primary_dim=4, capsule_dim=4, **kwargs
    )


def tiny_efficient(**kwargs):
    return EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,), **kwargs)


def round_trip(model):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        return keras.saving.load_model(path, safe_mode=True)


def leaf_layers(model):
    """The layers under `model`, nested models opened, inputs left out."""
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from leaf_layers(layer)
        elif not isinstance(layer, keras.layers.InputLayer):
            yield layer
            if isinstance(getattr(layer, "router", None), keras.layers.Layer):
                yield layer.router


def check_policy_round_trip(build, images, given_as, policy="mixed_float16"):
    """A model made under `policy` (its `dtype=` argument, or the global
    policy) has it in every layer, and keeps it through a `.keras` file
    loaded under the float32 global policy."""
    if given_as == "argument":
        model = build(dtype=policy)
    else:
        keras.config.set_dtype_policy(policy)  # conftest restores float32
        model = build()
        keras.config.set_dtype_policy("float32")
    expected = to_numpy(model(images))
    loaded = round_trip(model)
    for m in (model, loaded):
        assert m.dtype_policy.name == policy
        assert {layer.dtype_policy.name for layer in leaf_layers(m)} == {policy}
        assert all(w.dtype == "float32" for w in m.weights)
        assert keras.backend.standardize_dtype(m(images).dtype) == "float16"
    # A backbone's config is Keras's own (its input layer renamed on load).
    configs = [
        {k: v for k, v in m.get_config().items() if k != "backbone"} for m in (loaded, model)
    ]
    assert configs[0] == configs[1]
    np.testing.assert_allclose(to_numpy(loaded(images)), expected, rtol=1e-3, atol=1e-3)


def test_old_config_without_dtype_loads():
    model = tiny_capsnet()
    config = model.get_config()
    del config["dtype"]  # configs saved before the policy was kept
    restored = CapsNet.from_config(config)
    assert restored.dtype_policy.name == "float32"
    assert restored.count_params() == model.count_params()


def batch(shape, classes=3, n=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(size=(n, *shape)).astype("float32"), rng.integers(0, classes, n)


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


@pytest.mark.parametrize(
    "build,router",
    [
        (tiny_capsnet, kc.SelfAttentionRouting(temperature=2.0)),
        (tiny_efficient, None),
    ],
)
def test_fit_from_image_label_pairs_then_keras_round_trip(build, router):
    model = build(router=router)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        metrics=["accuracy"],
        jit_compile=jit_compile_for_backend(),
    )
    images, labels = batch(model.image_shape)
    decoder_before = [w.copy() for w in model.decoder.get_weights()]
    losses = model.fit(images, labels, batch_size=4, epochs=3, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    # The reconstruction term reaches the decoder through compute_loss.
    assert all(np.abs(a - b).max() > 0 for a, b in zip(decoder_before, model.decoder.get_weights()))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(model)
    assert loaded.get_config() == model.get_config()
    scores = model.predict(images, verbose=0)
    assert scores.shape == (8, 3)
    np.testing.assert_allclose(loaded.predict(images, verbose=0), scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded.reconstruct(images, labels)),
        keras.ops.convert_to_numpy(model.reconstruct(images, labels)),
        rtol=1e-5,
        atol=1e-6,
    )


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


def keras_auto_jit_compile():
    """What Keras's own `compile()` resolves `jit_compile="auto"` to here."""
    plain = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    plain.compile(optimizer="sgd", loss="mse")
    return plain.jit_compile


def check_compile_auto_and_xla_hint(model, conv_layer):
    """Ready models' `compile`: "auto" is XLA on TensorFlow's CPU (Keras's
    own "auto" elsewhere), and the layers are told whether XLA runs them."""
    from keras_capsules.conv import resolve_implementation

    def resolved():
        return resolve_implementation(
            conv_layer.implementation, conv_layer.strides, xla=conv_layer.xla
        )

    keras_auto = keras_auto_jit_compile()
    model.compile(optimizer="adam")
    if BACKEND == "tensorflow":  # on CPU here
        assert keras_auto is False and model.jit_compile is True
        assert conv_layer.xla is True and resolved() == "matmul"
    else:
        assert model.jit_compile == keras_auto
        assert conv_layer.xla is (keras_auto if BACKEND == "jax" else None)
    for kwargs in ({"jit_compile": False}, {"run_eagerly": True}):
        model.compile(optimizer="adam", **kwargs)
        assert model.jit_compile is False
        if BACKEND == "tensorflow":
            assert conv_layer.xla is False and resolved() == "conv"
    # A loaded model comes back compiled as saved (Keras skips models whose
    # `compile` is overridden unless `compile_from_config` is too).
    model.compile(optimizer="adam", jit_compile=False)
    model.optimizer.build(model.trainable_variables)  # as after `fit`
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "`compile\\(\\)` was not called")
        loaded = round_trip(model)
    assert loaded.compiled and loaded.jit_compile is False
    assert isinstance(loaded.optimizer, keras.optimizers.Adam)


def test_compile_auto_uses_xla_on_tensorflow_cpu_and_tells_the_layers():
    model = tiny_capsnet()
    check_compile_auto_and_xla_hint(model, model.features.get_layer("primary"))


def expected_loss(model, images, labels):
    """Margin loss of the scores + weight * MSE of the label-masked reconstruction."""
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
        (model.digit_capsules.kernel, 300.0),
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


def test_return_poses_gives_custom_loops_the_poses_of_the_forward_pass():
    model = tiny_capsnet()
    model.compile(optimizer="adam")
    x, y = batch(model.image_shape, n=8)
    assert not model.returns_poses
    with model.returning_poses():
        assert model.returns_poses
        scores, poses = model(x, training=False)
    assert not model.returns_poses
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(x, return_poses=True)[1]),
        keras.ops.convert_to_numpy(poses),
        rtol=1e-6,
    )
    assert tuple(poses.shape) == (8, model.num_classes, 4)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(scores), keras.ops.convert_to_numpy(model(x)), rtol=1e-6
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model.compute_loss(x, y, (scores, poses))),
        expected_loss(model, x, y),
        rtol=1e-5,
    )


def test_digit_capsules_layer_is_named_as_the_attribute():
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
        assert model.digit_capsules.name == "digit_capsules"


class OrthogonalCapsNet(CapsuleClassifier):
    """A tiny classifier whose class capsules are orthogonal."""

    def __init__(self, **kwargs):
        super().__init__((12, 12, 1), 3, reconstruction=False, **kwargs)
        images = keras.Input(self.image_shape)
        children = kc.PrimaryCapsule(2, 4, 5, strides=2)(images)
        self.features = keras.Model(images, children)
        self.digit_capsules = kc.Capsule(3, 6, orthogonal=True, name="digit_capsules")
        self.digit_capsules.build(children.shape)
        self.build((None, *self.image_shape))


def test_routing_coefficients_of_orthogonal_capsules():
    model = OrthogonalCapsNet()
    images = np.random.default_rng(1).uniform(size=(2, 12, 12, 1)).astype("float32")
    children = to_numpy(model.features(images)).astype("float64")
    transforms = ref.householder_orthogonal(
        to_numpy(model.digit_capsules.householder).astype("float64"), 4, 6
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


@pytest.mark.skipif(BACKEND != "tensorflow", reason="XLA on CPU by default: TensorFlow's question")
def test_compile_auto_keeps_xla_off_on_cpu_for_models_slower_with_it():
    """`xla_on_cpu = False` (HeinsenCapsNet, the smallNORB Efficient-CapsNet):
    "auto" is Keras's own "auto", no XLA on TensorFlow's CPU."""
    keras_auto = keras_auto_jit_compile()
    for model in (
        kc.models.HeinsenCapsNet((32, 32, 2), 3, parts=2, channels=4),
        kc.models.EfficientCapsNet((24, 24, 2), 3, architecture="smallnorb"),
    ):
        assert model.xla_on_cpu is False
        model.compile()
        assert model.jit_compile == keras_auto, type(model).__name__
    assert kc.models.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,)).xla_on_cpu is True
