"""CapsuleModel, the contract of every ready model: `compile`'s "auto"
(XLA on TensorFlow's CPU, the layers' XLA hint), `return_poses`. Each
ready model runs the model harness (tests/test_case.py,
`ModelTestCase.run_model_test`) in its own file."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.models.builders import batch, expected_loss, tiny_capsnet, tiny_matrix_capsnet
from tests.test_case import BACKEND


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
    # A loaded model comes back compiled as saved (jit_compile included):
    # the model harness, tests/test_case.py.


@pytest.mark.parametrize(
    "build, conv_layer",
    [
        (tiny_capsnet, lambda model: model.features.get_layer("primary")),
        (tiny_matrix_capsnet, lambda model: model.network.get_layer("conv")),
    ],
    ids=["CapsNet", "MatrixCapsNet"],
)
def test_compile_auto_uses_xla_on_tensorflow_cpu_and_tells_the_layers(build, conv_layer):
    model = build()
    check_compile_auto_and_xla_hint(model, conv_layer(model))


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


@pytest.mark.skipif(BACKEND != "tensorflow", reason="XLA on CPU by default: TensorFlow's question")
def test_compile_auto_keeps_xla_off_on_cpu_for_models_slower_with_it():
    """`xla_on_cpu = False` (HeinsenCapsNet, the smallNORB Efficient-CapsNet):
    "auto" is Keras's own "auto", no XLA on TensorFlow's CPU."""
    keras_auto = keras_auto_jit_compile()
    for model in (
        kc.models.HeinsenCapsNet((32, 32, 2), 3, num_parts=2, channels=4),
        kc.models.EfficientCapsNet((24, 24, 2), 3, architecture="smallnorb"),
    ):
        assert model.xla_on_cpu is False
        model.compile()
        assert model.jit_compile == keras_auto, type(model).__name__
    assert kc.models.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,)).xla_on_cpu is True


@pytest.mark.parametrize("method", ["predict", "evaluate", "fit"])
def test_wrong_image_shape_is_refused_before_any_step_and_the_model_still_saves(method, tmp_path):
    # On JAX a step that fails inside Keras's traced function leaves the
    # model unable to save ('NoneType' object is not callable); the ready
    # models name the expected shape before Keras traces anything.
    model = tiny_capsnet()
    images, labels = batch(model.image_shape)
    model.predict(images, verbose=0)
    wrong = images[:, :-2]
    args = (wrong,) if method == "predict" else (wrong, labels)
    with pytest.raises(ValueError, match=r"expects images of shape \(batch, 20, 20, 1\)"):
        getattr(model, method)(*args, verbose=0)
    if method == "predict":  # A direct call: Keras's input check names the shape.
        with pytest.raises(ValueError, match=r"expected shape=\(None, 20, 20, 1\)"):
            model(wrong)
    model.save(tmp_path / "model.keras")
    assert keras.saving.load_model(tmp_path / "model.keras", safe_mode=True) is not None


def test_a_dataset_of_wrong_images_is_refused():
    tf = pytest.importorskip("tensorflow")
    model = tiny_capsnet()
    images, labels = batch(model.image_shape)
    dataset = tf.data.Dataset.from_tensor_slices((images[:, :, :-1], labels)).batch(4)
    with pytest.raises(ValueError, match=r"Received: x.shape=\(None, 20, 19, 1\)"):
        model.evaluate(dataset, verbose=0)
