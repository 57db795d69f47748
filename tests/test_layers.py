"""PrimaryCapsule, Capsule, Length and Mask."""

import keras
import numpy as np
import pytest

import keras_capsules
from keras_capsules.layers import Capsule, Length, Mask, PrimaryCapsule, StridedConv2D
from tests.parity.backend_grad import to_numpy
from tests.test_case import LayerTestCase

RNG = np.random.default_rng(0)
IMAGES = RNG.normal(size=(2, 9, 9, 3)).astype("float32")
POSES = RNG.normal(size=(2, 6, 4)).astype("float32")
ACTIVATIONS = RNG.uniform(size=(2, 6)).astype("float32")


class TestPrimaryCapsule(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            PrimaryCapsule, {"num_capsules": 4, "capsule_dim": 5, "kernel_size": 3,
                             "strides": 2}, IMAGES, (2, 4 * 4 * 4, 5))

    def test_same_padding_no_squash(self):
        layer = PrimaryCapsule(2, 3, 3, padding="same", squash=False)
        assert tuple(layer(IMAGES).shape) == (2, 9 * 9 * 2, 3)

    def test_capsule_type_is_fastest_axis_after_position(self):
        layer = PrimaryCapsule(2, 3, 1, squash=False, bias_initializer="ones")
        layer.build(IMAGES.shape)
        layer.kernel.assign(np.zeros(layer.kernel.shape, "float32"))
        layer.bias.assign(np.arange(6, dtype="float32"))
        out = to_numpy(layer(IMAGES))
        np.testing.assert_array_equal(out[0, :2], [[0, 1, 2], [3, 4, 5]])

    def test_paper_shape(self):
        out = PrimaryCapsule(32, 8, 9, strides=2)(keras.Input((20, 20, 256)))
        assert tuple(out.shape) == (None, 1152, 8)

    @pytest.mark.parametrize(
        "kwargs, message",
        [({"num_capsules": 0}, "num_capsules=0"), ({"capsule_dim": -2}, "capsule_dim=-2"),
         ({"kernel_size": (3, 0)}, "kernel_size"), ({"padding": "full"}, "padding='full'"),
         ({"strides": 0}, "strides=0")],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            PrimaryCapsule(**{"num_capsules": 2, "capsule_dim": 4, "kernel_size": 3, **kwargs})

    def test_kernel_larger_than_grid(self):
        with pytest.raises(ValueError, match="kernel_size"):
            PrimaryCapsule(2, 4, 11)(keras.Input((9, 9, 3)))


class TestCapsule(LayerTestCase):
    @pytest.mark.parametrize("share_weights", (False, True))
    def test_layer(self, share_weights):
        self.run_layer_test(
            Capsule, {"num_capsules": 3, "capsule_dim": 5, "share_weights": share_weights},
            POSES, (2, 3, 5))

    def test_with_activations(self):
        self.run_layer_test(
            Capsule, {"num_capsules": 3, "capsule_dim": 5, "return_activations": True},
            [POSES, ACTIVATIONS], ((2, 3, 5), (2, 3)), run_mixed_precision_check=False)

    def test_custom_router_round_trips(self):
        router = keras_capsules.routing.DynamicRouting(iterations=1, agreement="cosine")
        layer = Capsule(3, 5, router=router)
        restored = Capsule.from_config(layer.get_config())
        assert restored.router.get_config()["agreement"] == "cosine"
        assert restored.router.iterations == 1

    def test_shared_weights_accept_any_in_caps(self):
        layer = Capsule(3, 5, share_weights=True)
        out = layer(keras.Input((None, 4)))
        assert tuple(out.shape) == (None, 3, 5)
        assert tuple(layer(POSES).shape) == (2, 3, 5)

    def test_votes_are_one_transform_per_pair(self):
        layer = Capsule(3, 5, router=keras_capsules.routing.DynamicRouting(iterations=1))
        layer.build(POSES.shape)
        w = RNG.normal(size=layer.kernel.shape).astype("float32")
        layer.kernel.assign(w)
        votes = np.einsum("bid,ijde->bije", POSES, w)
        expected = votes.sum(axis=1) / 3  # uniform coefficients 1/out_caps
        n2 = (expected ** 2).sum(-1, keepdims=True)
        expected = n2 / (1 + n2) * expected / np.sqrt(n2 + 1e-7)
        np.testing.assert_allclose(to_numpy(layer(POSES)), expected, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize(
        "kwargs, message",
        [({"num_capsules": 0}, "num_capsules=0"), ({"capsule_dim": 0}, "capsule_dim=0"),
         ({"router": "dynamo"}, "router='dynamo'")],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            Capsule(**{"num_capsules": 2, "capsule_dim": 4, **kwargs})

    def test_unknown_in_caps_needs_shared_weights(self):
        with pytest.raises(ValueError, match="share_weights"):
            Capsule(3, 5)(keras.Input((None, 4)))


class TestLength(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(Length, {}, POSES, (2, 6))

    def test_values(self):
        expected = np.sqrt((POSES ** 2).sum(-1) + 1e-7)
        np.testing.assert_allclose(to_numpy(Length()(POSES)), expected, rtol=1e-6)


class TestMask(LayerTestCase):
    def test_layer_with_labels(self):
        labels = np.eye(6, dtype="float32")[[1, 4]]
        self.run_layer_test(Mask, {}, [POSES, labels], (2, 24))

    def test_layer_by_longest(self):
        self.run_layer_test(Mask, {}, POSES, (2, 24))

    def test_values(self):
        out = to_numpy(Mask()([POSES, np.array([1, 4])])).reshape(2, 6, 4)
        expected = np.zeros_like(POSES)
        expected[0, 1], expected[1, 4] = POSES[0, 1], POSES[1, 4]
        np.testing.assert_array_equal(out, expected)
        longest = np.linalg.norm(POSES, axis=-1).argmax(-1)
        out = to_numpy(Mask()(POSES)).reshape(2, 6, 4)
        for b in range(2):
            np.testing.assert_array_equal(out[b, longest[b]], POSES[b, longest[b]])
            assert np.count_nonzero(out[b]) == 4


    @pytest.mark.parametrize("form", ("ids", "ids_column", "one_hot"))
    def test_label_forms_keep_the_same_capsule(self, form):
        # Keras's sparse labels come as (batch, 1): read as ids, not as a
        # one-hot of width 1 (which kept every capsule, times the id).
        ids = np.array([1, 4])
        labels = {"ids": ids, "ids_column": ids[:, None],
                  "one_hot": np.eye(6, dtype="float32")[ids]}[form]
        out = to_numpy(Mask()([POSES, labels])).reshape(2, 6, 4)
        expected = np.zeros_like(POSES)
        expected[0, 1], expected[1, 4] = POSES[0, 1], POSES[1, 4]
        np.testing.assert_array_equal(out, expected)

    def test_symbolic_sparse_labels(self):
        poses, labels = keras.Input((6, 4)), keras.Input((1,), dtype="int32")
        model = keras.Model([poses, labels], Mask()([poses, labels]))
        out = to_numpy(model([POSES, np.array([[1], [4]], "int32")])).reshape(2, 6, 4)
        assert np.count_nonzero(out[0, 1]) == 4 and np.count_nonzero(out) == 8


def test_primary_capsule_implementation_choice_and_error():
    from keras_capsules.conv import resolve_implementation

    assert resolve_implementation("conv", (2, 2)) == "conv"
    backend = keras.backend.backend()  # on CPU here
    assert resolve_implementation("auto", (1, 1)) == ("matmul" if backend == "jax" else "conv")
    assert resolve_implementation("auto", (2, 2)) == ("hybrid" if backend == "torch" else "matmul")
    with pytest.raises(ValueError, match="implementation='fft'"):
        PrimaryCapsule(2, 4, 3, implementation="fft")


class TestStridedConv2D(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            StridedConv2D, {"filters": 4, "kernel_size": 3, "strides": 2, "activation": "relu",
                            "implementation": "matmul"}, IMAGES, (2, 4, 4, 4))

    def test_implementations_agree_with_keras_conv2d(self):
        reference = keras.layers.Conv2D(4, 3, strides=2, padding="same")
        expected = to_numpy(reference(IMAGES))
        for implementation in ("auto", "conv", "matmul", "hybrid"):
            layer = StridedConv2D(4, 3, strides=2, padding="same", implementation=implementation)
            layer.build(IMAGES.shape)
            layer.set_weights(reference.get_weights())
            np.testing.assert_allclose(to_numpy(layer(IMAGES)), expected, rtol=1e-5, atol=1e-5)

    def test_auto_falls_back_to_the_native_conv_where_matmul_does_not_apply(self):
        layer = StridedConv2D(6, 3, strides=2, groups=3)
        assert tuple(layer(IMAGES).shape) == (2, 4, 4, 6)
        for implementation in ("matmul", "hybrid"):
            with pytest.raises(ValueError, match="groups=3"):
                StridedConv2D(6, 3, strides=2, groups=3, implementation=implementation)
        with pytest.raises(ValueError, match="implementation='fft'"):
            StridedConv2D(4, 3, implementation="fft")
