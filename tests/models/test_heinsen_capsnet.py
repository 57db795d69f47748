"""HeinsenCapsNet: the model harness, the author's architecture (sizes,
parameter count, ordering), the model contract; with the author's released
weights, his own code's outputs (tests/fixtures/README.md)."""

import os

import keras
import numpy as np

import keras_capsules as kc
from keras_capsules.convert.heinsen import heinsen_mapping
from tests.conftest import authors_weights
from tests.test_case import BACKEND, ModelTestCase, jit_compile_for_backend, to_numpy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WEIGHTS, needs_authors_weights = authors_weights(
    "heinsen2019_smallNORB_pretrained_model_state_dict.pt"
)
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "heinsen_smallnorb.npz")
# (32, 32) images: a 1 x 1 grid of parts after the six convolutions.
SMALL = dict(
    input_shape=(32, 32, 2),
    num_classes=3,
    num_parts=4,
    channels=8,
    router={"class_name": "heinsen", "config": {"iterations": 2}},
)


def _images(count=2, shape=(32, 32, 2), seed=0):
    return np.random.default_rng(seed).uniform(size=(count, *shape)).astype("float32")


def _random_state_dict(num_classes=3, parts=4, channels=8, seed=0):
    """The author's keys and shapes with random values (BatchNorm variances > 0)."""
    rng = np.random.default_rng(seed)
    state = {}
    for key, (_, shape, _) in heinsen_mapping(num_classes, parts, channels).items():
        value = rng.normal(size=shape) * 0.3
        state[key] = (np.abs(value) + 0.5 if key.endswith("running_var") else value).astype(
            "float32"
        )
    state["convolve.0.num_batches_tracked"] = np.array(10)
    state["routings.0.CONST_R_init"] = np.array(1 / parts, "float32")
    return state


def _encode(model, images):
    """`model.encode(images)` as NumPy; jitted on JAX, where op-by-op
    dispatch compiles each of the routings' many small ops."""
    if BACKEND == "jax":
        import jax

        return tuple(to_numpy(t) for t in jax.jit(model.encode)(images))
    return tuple(to_numpy(t) for t in model.encode(images))


class TestHeinsenCapsNet(ModelTestCase):
    def test_model_and_contract(self):
        images, labels = _images(4), np.array([0, 1, 2, 0])
        run = self.run_model_test(
            lambda **kwargs: kc.HeinsenCapsNet(**SMALL, **kwargs),
            images,
            labels,
            (4, 3),
            # Eager on TensorFlow: tracing this train step costs ~7 s there,
            # and the layers' compiled (XLA) steps are tested by their own tests.
            jit_compile=jit_compile_for_backend(xla_on_tensorflow=False),
            run_eagerly=BACKEND == "tensorflow",
        )
        model = run.model
        scores, poses, variances = _encode(model, images)
        assert scores.shape == (4, 3) and poses.shape == variances.shape == (4, 3, 4, 4)
        assert np.all(variances > 0)
        assert model.default_learning_rate == 5e-4
        assert isinstance(model.default_loss(), keras.losses.CategoricalCrossentropy)
        # The first routing shares its weights over its parts * 1 * 1 children.
        assert tuple(model.network.get_layer("part_capsules").kernel.shape) == (4, 4, 4)
        assert tuple(model.network.get_layer("class_capsules").kernel.shape) == (4, 3, 4, 4)
        assert any(np.any(to_numpy(w) != run.initial(w)) for w in model.trainable_weights)
        if BACKEND != "jax":  # eager calls are slow on JAX (op by op)
            # predict (eager here) and the encoder give the same scores.
            np.testing.assert_allclose(run.predictions, scores, rtol=1e-5, atol=1e-5)
            called = model(images, return_poses=True)
            np.testing.assert_allclose(to_numpy(called[1]), poses, rtol=1e-5, atol=1e-5)


def test_the_authors_layout_from_a_synthetic_state_dict():
    """Each converted weight lands where the author's code reads it: the
    model equals a float64 NumPy transcription of his forward pass."""
    from tests.reference.heinsen import heinsen_routing, heinsen_votes

    state = _random_state_dict()
    model = kc.HeinsenCapsNet(**SMALL).load_authors_state_dict(state)
    images = _images()
    scores, poses, variances = _encode(model, images)

    def batch_norm(x, prefix):  # x: NCHW
        g, b, m, v = (
            state[f"{prefix}.{k}"] for k in ("weight", "bias", "running_mean", "running_var")
        )
        return (x - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-5) * g[:, None, None] + b[
            :, None, None
        ]

    def conv(x, prefix, stride=1):  # NCHW, OIHW, valid
        w, b = state[f"{prefix}.weight"].astype("float64"), state[f"{prefix}.bias"]
        k = w.shape[-1]
        h, wd = (x.shape[2] - k) // stride + 1, (x.shape[3] - k) // stride + 1
        out = np.zeros((x.shape[0], w.shape[0], h, wd))
        for i in range(k):
            for j in range(k):
                patch = x[:, :, i : i + stride * h : stride, j : j + stride * wd : stride]
                out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
        return out + b[:, None, None]

    x = images.transpose(0, 3, 1, 2).astype("float64")
    n, _, h, w = x.shape
    grid = np.stack(np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij"))
    x = np.concatenate([x, np.broadcast_to(grid, (n, 2, h, w))], axis=1)
    for i, stride in enumerate((1, 2, 1, 2, 1, 2)):
        x = conv(batch_norm(x, f"convolve.{3 * i}"), f"convolve.{3 * i + 1}", stride)
        x = x / (1 + np.exp(-x))
    a = conv(batch_norm(x, "compute_a.0"), "compute_a.1").reshape(n, -1)
    mu = conv(batch_norm(x, "compute_mu.0"), "compute_mu.1")
    mu = mu.reshape(n, -1, 4, 4, *mu.shape[-2:]).transpose(0, 1, 4, 5, 2, 3).reshape(n, -1, 4, 4)
    for index in (0, 1):
        r = {k: state[f"routings.{index}.{k}"] for k in ("W", "B", "beta_use", "beta_ign")}
        votes = heinsen_votes(mu, r["W"], r["B"])
        mu, a, _, sig2 = heinsen_routing(votes, a, r["beta_use"], r["beta_ign"], iterations=2)
        mu, sig2 = mu.reshape(n, -1, 4, 4), sig2.reshape(n, -1, 4, 4)
    np.testing.assert_allclose(scores, a, rtol=1e-4, atol=1e-4 * np.abs(a).max())
    np.testing.assert_allclose(poses, mu, rtol=1e-4, atol=1e-4 * np.abs(mu).max())
    np.testing.assert_allclose(variances, sig2, rtol=1e-4, atol=1e-4 * np.abs(sig2).max())


@needs_authors_weights
def test_the_authors_weights_give_his_outputs():
    fixture = np.load(FIXTURE)
    model = kc.HeinsenCapsNet()
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == 271688  # the parameters of the author's state dict
    assert model.count_params() == 271688 + 904  # and BatchNorm's moving statistics
    assert tuple(model.network.get_layer("part_capsules").input[0].shape) == (None, 5184, 4, 4)
    model.load_authors_weights(WEIGHTS)
    outputs = _encode(model, (fixture["images"] / 255.0).astype("float32"))
    for name, out in zip(("a_out", "mu_out", "sig2_out"), outputs):
        expected = fixture[name]
        assert out.shape == expected.shape, name
        error = np.abs(out - expected).max() / np.abs(expected).max()
        assert error < 1e-4, f"{name}: max abs difference {error:.3g} of the scale on {BACKEND}"
    np.testing.assert_array_equal(outputs[0].argmax(-1), fixture["a_out"].argmax(-1))
