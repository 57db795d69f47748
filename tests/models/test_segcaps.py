"""SegCaps: the model harness (learning with the defaults), the paper's
architecture (parameter count), the masked reconstruction, errors. The
masks contract of its base: tests/models/test_capsule_segmenter.py."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.test_case import BACKEND, ModelTestCase, jit_compile_for_backend, to_numpy

SIZE = 16

ONE_ITERATION = {"class_name": "dynamic", "config": {"iterations": 1}}
TWO_ITERATIONS = {"class_name": "dynamic", "config": {"iterations": 2}}


def squares(count, size=SIZE, seed=0, classes=1):
    """Noisy images of one bright rectangle per class, and its masks."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((count, size, size, classes), "float32")
    for i in range(count):
        for k in range(classes):
            h, w = rng.integers(3, size // 2, 2)
            r, c = rng.integers(0, size - h), rng.integers(0, size - w)
            masks[i, r : r + h, c : c + w, k] = 1
    images = 0.8 * masks.max(axis=-1, keepdims=True) + rng.normal(0, 0.1, masks.shape[:3] + (1,))
    return np.clip(images, 0, 1).astype("float32"), masks


def test_parameter_count_is_the_papers():
    """SegCaps R3 on one-channel images: 1.4 M parameters (the paper),
    whatever the image size."""
    assert kc.models.SegCaps((16, 16, 1)).count_params() == 1_425_649
    assert kc.models.SegCaps((32, 24, 1), router=ONE_ITERATION).count_params() == 1_425_649
    # A class more: one more 16D segmentation capsule type (1x1 kernel and
    # bias) and a decoder input of 32 channels.
    assert kc.models.SegCaps((16, 16, 1), num_classes=2).count_params() == (
        1_425_649 + (16 * 16 + 16) + 16 * 64
    )


def jitted(function):
    """`function` compiled on JAX, whose op-by-op dispatch compiles each
    of the routings' many small ops."""
    if BACKEND == "jax":
        import jax

        return jax.jit(function)
    return function


def test_outputs_and_reconstructions():
    model = kc.models.SegCaps((SIZE, SIZE, 3), num_classes=2, router=ONE_ITERATION)
    images = np.random.default_rng(0).uniform(size=(2, SIZE, SIZE, 3)).astype("float32")
    scores, poses = jitted(lambda x: model(x, return_poses=True))(images)
    assert tuple(scores.shape) == (2, SIZE, SIZE, 2) and tuple(poses.shape) == (
        2,
        SIZE,
        SIZE,
        2,
        16,
    )
    scores = to_numpy(scores)
    assert np.all((scores >= 0) & (scores < 1))
    # Length's definition, sqrt(|pose|^2 + epsilon): the epsilon adds up to
    # 1.5e-5 to the lengths near 0.003 that some draws of the weights give.
    lengths = np.sqrt(np.sum(to_numpy(poses) ** 2, axis=-1) + model.scores.epsilon)
    np.testing.assert_allclose(lengths, scores, atol=1e-5)
    assert tuple(model.decode(poses, scores > 0.5).shape) == (2, SIZE, SIZE, 3)
    # Masked by labels: no mask, no capsule reaches the decoder.
    empty = model.decode(poses, np.zeros((2, SIZE, SIZE, 2)))
    zero = model.decoder(np.zeros((2, SIZE, SIZE, 32), "float32"))
    np.testing.assert_allclose(to_numpy(empty), to_numpy(zero), atol=1e-6)


def test_loss_is_the_papers_and_includes_the_masked_reconstruction():
    model = kc.models.SegCaps((SIZE, SIZE, 1), router=ONE_ITERATION, positive_weight=3.0)
    model.compile()
    images, masks = squares(2)

    def losses(images, masks):
        scores, poses = model(images, return_poses=True)
        total = model.compute_loss(images, masks, (scores, poses))
        bce = kc.losses.WeightedBinaryCrossentropy(3.0)(masks, scores)
        return total, bce, model.decode(poses, masks)

    total, bce, decoded = (to_numpy(t) for t in jitted(losses)(images, masks))
    reconstruction = 0.1 * np.mean((decoded - images * masks) ** 2)
    np.testing.assert_allclose(total, bce + reconstruction, rtol=1e-5)
    assert isinstance(model.optimizer, keras.optimizers.Adam)
    np.testing.assert_allclose(float(model.optimizer.beta_1), 0.99)


class TestSegCaps(ModelTestCase):
    @pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
    def test_model_learns_with_the_defaults(self):
        """`compile()` then `fit(images, masks)`: the loss falls on images
        whose masks follow from them; the model saves and loads."""
        images, masks = squares(32)
        run = self.run_model_test(
            lambda **kwargs: kc.models.SegCaps((SIZE, SIZE, 1), router=ONE_ITERATION, **kwargs),
            images,
            masks,
            (32, SIZE, SIZE, 1),
            jit_compile=jit_compile_for_backend(xla_on_tensorflow=False),
            batch_size=8,
            epochs=4,
        )
        history = run.history
        assert history["loss"][-1] < 0.9 * history["loss"][0], history["loss"]
        np.testing.assert_allclose(run.loaded_predictions, run.predictions, atol=1e-6)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="XLA on CPU by default: TensorFlow's question")
def test_default_compile_trains_with_xla_on_tensorflow_cpu():
    """`compile()`'s "auto" is XLA on TensorFlow's CPU for SegCaps: one
    step of it (the harness above trains without XLA on TensorFlow, where
    each of its compiles would cost ~10 s)."""
    model = kc.models.SegCaps((SIZE, SIZE, 1), router=ONE_ITERATION)
    model.compile()
    assert model.jit_compile is True
    images, masks = squares(2)
    assert np.all(np.isfinite(model.train_on_batch(images, masks)))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"input_shape": (20, 16, 1)}, r"divisible by 8.*input_shape=\(20, 16, 1\)"),
        ({"router": {"class_name": "dynamic", "config": {"iterations": 0}}}, "iterations=0"),
        ({"positive_weight": -1.0}, "Received: positive_weight=-1.0"),
        ({"reconstruction_weight": -0.1}, "Received: reconstruction_weight=-0.1"),
        ({"num_classes": 0}, "Received: num_classes=0"),
        ({"implementation": "fft"}, "Received: implementation='fft'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kc.models.SegCaps(**{"input_shape": (SIZE, SIZE, 1), **kwargs})


def test_bad_masks_are_named():
    model = kc.models.SegCaps((SIZE, SIZE, 1), router=ONE_ITERATION)
    model.compile()
    images, _ = squares(2)
    with pytest.raises(ValueError, match=r"Received: y.shape=\(2, 8, 8, 1\)"):
        model.fit(images, np.zeros((2, 8, 8, 1)), verbose=0)
    no_decoder = kc.models.SegCaps((SIZE, SIZE, 1), router=ONE_ITERATION, reconstruction_weight=0)
    assert no_decoder.decoder is None
    with pytest.raises(ValueError, match="reconstruction_weight=0"):
        no_decoder.decode(np.zeros((2, SIZE, SIZE, 1, 16), "float32"), np.ones((2, SIZE, SIZE, 1)))


# mixed_float16's forward pass: the model harness (TestSegCaps), finite and
# the same after a round trip; its train step on torch here.
@pytest.mark.parametrize(
    "policy", ["mixed_bfloat16"] + (["mixed_float16"] if BACKEND == "torch" else [])
)
def test_mixed_precision_is_finite(policy):
    model = kc.models.SegCaps((SIZE, SIZE, 1), router=TWO_ITERATIONS, dtype=policy)
    images, masks = squares(4)
    scores = jitted(model)(images)
    assert keras.backend.standardize_dtype(scores.dtype) == policy.split("_")[1]
    assert np.all(np.isfinite(to_numpy(keras.ops.cast(scores, "float32"))))
    if BACKEND == "torch":  # a step compiles for ~30 s on TensorFlow and JAX
        model.compile()
        assert np.all(np.isfinite(model.train_on_batch(images, masks)))
