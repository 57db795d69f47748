"""CapsuleImageClassifier: capsules on any Keras backbone (the model
harness, backbones of every kind, mixed precision)."""

import json

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.models import CapsuleImageClassifier
from tests.test_case import ModelTestCase, jit_compile_for_backend, round_trip, to_numpy

SHAPE = (12, 12, 3)


def tiny_backbone(name="tiny_backbone", dtype=None):
    """Conv + BatchNorm + ReLU, stride 2: (12, 12, 3) -> (5, 5, 6)."""
    return keras.Sequential(
        [
            keras.Input(SHAPE),
            keras.layers.Conv2D(6, 3, strides=2, dtype=dtype),
            keras.layers.BatchNormalization(dtype=dtype),
            keras.layers.ReLU(dtype=dtype),
        ],
        name=name,
    )


def tiny_model(**kwargs):
    kwargs = {
        "primary_capsules": 2,
        "primary_dim": 4,
        "capsule_dim": 4,
        "decoder_units": (8,),
        **kwargs,
    }
    return CapsuleImageClassifier(kwargs.pop("backbone", None) or tiny_backbone(), 3, **kwargs)


def batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    # Learnable: the class sets the mean colour.
    images = rng.uniform(0, 0.5, (n, *SHAPE)) + 0.5 * np.eye(3)[labels][:, None, None, :]
    return images.astype("float32"), labels


def as_json(config):
    """The backbone's build shapes come back from a file as lists."""
    return json.loads(json.dumps(config))


class TestCapsuleImageClassifier(ModelTestCase):
    def test_model_with_decoder(self):
        images, labels = batch()

        def build(**kwargs):
            # The backbone keeps its own policy: made under the model's here;
            # the router, a short config, gets the model's.
            return tiny_model(
                backbone=tiny_backbone(dtype=kwargs.get("dtype")),
                reconstruction=True,
                router={"class_name": "dynamic", "config": {"iterations": 2}},
                **kwargs,
            )

        run = self.run_model_test(
            build,
            images,
            labels,
            (8, 3),
            batch_size=4,
            epochs=3,
            same_outputs=lambda model: model.reconstruct(images, labels),
        )
        model, loaded = run.model, run.loaded
        assert (
            keras.saving.get_registered_name(CapsuleImageClassifier)
            == "keras_capsules>CapsuleImageClassifier"
        )
        # 5 x 5 positions x 2 types; classes 3, dim 4.
        assert model.features.output_shape == (None, 50, 4)
        losses = run.history["loss"]
        assert losses[-1] < losses[0], losses
        # The backbone trains with the capsules.
        assert any(np.abs(to_numpy(w) - run.initial(w)).max() > 0 for w in model.backbone.weights)
        # The backbone's config too (the harness leaves it out).
        assert isinstance(loaded.backbone, keras.Sequential)
        assert as_json(loaded.get_config()) == as_json(model.get_config())
        assert as_json(
            CapsuleImageClassifier.from_config(model.get_config()).get_config()
        ) == as_json(model.get_config())


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    keras.config.set_dtype_policy(policy)
    model = tiny_model(reconstruction=True)
    images, labels = batch()
    scores = model(images)
    assert keras.backend.standardize_dtype(scores.dtype) == policy.split("_")[1]
    model.compile(optimizer="adam", jit_compile=jit_compile_for_backend(xla_on_tensorflow=False))
    loss = model.fit(images, labels, batch_size=4, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss))
    for w in model.weights:
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(w.value).astype("float32"))), w.path
    loaded = round_trip(model)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(keras.ops.cast(loaded(images), "float32")),
        keras.ops.convert_to_numpy(keras.ops.cast(model(images), "float32")),
        rtol=1e-3,
    )


def test_layer_backbone_and_functional_use():
    # A bare layer (no input shape of its own) as backbone, and the model
    # used as a layer of a functional model with a None batch.
    model = tiny_model(
        backbone=keras.layers.Conv2D(5, 3, strides=2, name="conv"),
        input_shape=SHAPE,
        router=kc.SelfAttentionRouting(),
    )
    inputs = keras.Input(SHAPE)
    outer = keras.Model(inputs, model(inputs))
    assert outer.output_shape == (None, 3)
    images, _ = batch(n=2)
    loaded = round_trip(outer)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(images)),
        keras.ops.convert_to_numpy(outer(images)),
        rtol=1e-5,
        atol=1e-6,
    )


def test_functional_backbone_with_unknown_image_size():
    # A residual functional model, as keras.applications and keras-hub
    # backbones are (ResNet50 takes ~100 s to build on JAX here).
    inputs = keras.Input((None, None, 3))
    x = keras.layers.Conv2D(4, 3, strides=2, activation="relu")(inputs)
    x = keras.layers.Add()([x, keras.layers.Conv2D(4, 1)(x)])
    backbone = keras.Model(inputs, x, name="residual")
    model = tiny_model(backbone=backbone, input_shape=SHAPE)
    assert model.image_shape == SHAPE and not hasattr(model, "decoder")  # off by default
    images, _ = batch(n=2)
    loaded = round_trip(model)
    assert loaded.backbone.name == "residual"
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(images)),
        keras.ops.convert_to_numpy(model(images)),
        rtol=1e-5,
        atol=1e-6,
    )


def test_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match="backbone"):
        CapsuleImageClassifier("resnet50", 3)
    with pytest.raises(ValueError, match=r"input_shape=\(height"):
        CapsuleImageClassifier(keras.layers.Conv2D(4, 3), 3)
    pooled = keras.Sequential(
        [keras.Input(SHAPE), keras.layers.Conv2D(4, 3), keras.layers.GlobalAveragePooling2D()]
    )
    with pytest.raises(ValueError, match="feature map"):
        CapsuleImageClassifier(pooled, 3)
    with pytest.raises(ValueError, match="primary_capsules"):
        tiny_model(primary_capsules=0)
    with pytest.raises(ValueError, match="num_classes"):
        CapsuleImageClassifier(tiny_backbone(), 0)


@pytest.mark.parametrize("reconstruction", [False, True])
def test_summary_rows_are_built_and_add_up_to_the_total(reconstruction):
    model = tiny_model(reconstruction=reconstruction)
    capsnet = kc.CapsNet(
        (20, 20, 1),
        3,
        conv_filters=4,
        primary_capsules=2,
        primary_dim=4,
        capsule_dim=4,
        decoder_units=(8,),
    )
    for m in (model, capsnet):
        assert all(layer.built for layer in m.layers)
        assert sum(layer.count_params() for layer in m.layers) == m.count_params()
        lines = []
        m.summary(print_fn=lambda line, lines=lines, **kwargs: lines.append(line))
        assert "unbuilt" not in "\n".join(lines)
