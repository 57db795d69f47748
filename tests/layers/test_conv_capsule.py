"""ConvCapsule1D / ConvCapsule2D: shapes, windows, config, training, errors."""

import keras
import numpy as np
import pytest

import keras_capsules
from keras_capsules.layers import Capsule, ConvCapsule1D, ConvCapsule2D
from keras_capsules.routing import DynamicRouting, EMRouting
from tests.test_case import LayerTestCase, to_numpy

RNG = np.random.default_rng(0)
GRID = RNG.normal(size=(2, 5, 5, 2, 3)).astype("float32")
GRID_ACTIVATIONS = RNG.uniform(size=(2, 5, 5, 2)).astype("float32")
SEQUENCE = RNG.normal(size=(2, 7, 3)).astype("float32")
# A config, not an instance: each layer the layer test builds needs its own.
EM2 = keras.saving.serialize_keras_object(EMRouting(iterations=2))
DYNAMIC2 = keras.saving.serialize_keras_object(DynamicRouting(iterations=2))


class TestConvCapsule2D(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            ConvCapsule2D,
            {"num_capsules": 3, "capsule_dim": 4, "kernel_size": 3},
            GRID,
            {"kernel": ["kernel"]},
        )

    def test_layer(self):
        self.run_layer_test(
            ConvCapsule2D,
            {
                "num_capsules": 3,
                "capsule_dim": 4,
                "kernel_size": 3,
                "strides": 2,
                "padding": "same",
                "router": DYNAMIC2,
            },
            GRID,
            (2, 3, 3, 3, 4),
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
        )

    def test_layer_with_activations_and_em(self):
        self.run_layer_test(
            ConvCapsule2D,
            {
                "num_capsules": 3,
                "capsule_dim": 4,
                "kernel_size": 2,
                "router": EM2,
                "return_activations": True,
            },
            [GRID, GRID_ACTIVATIONS],
            ((2, 4, 4, 3, 4), (2, 4, 4, 3)),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=3,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("padding, expected", [("valid", (2, 2)), ("same", (3, 3))])
    def test_output_grid(self, padding, expected):
        out = ConvCapsule2D(2, 4, 3, strides=2, padding=padding)(keras.Input((5, 6, 2, 3)))
        assert tuple(out.shape) == (None, *expected, 2, 4)

    def test_one_window_is_a_capsule_layer(self):
        """On a 3x3 grid a 3x3 kernel has one window: the layer must equal a
        fully connected Capsule over its 18 children, kernel reshaped."""
        x = GRID[:, :3, :3]
        conv = ConvCapsule2D(3, 4, 3)
        conv.build(x.shape)
        w = RNG.normal(size=conv.kernel.shape).astype("float32")
        conv.kernel.assign(w)
        dense = Capsule(3, 4)
        dense.build((2, 18, 3))
        dense.kernel.assign(w.reshape(18, 3, 3, 4))
        np.testing.assert_allclose(
            to_numpy(conv(x))[:, 0, 0], to_numpy(dense(x.reshape(2, 18, 3))), rtol=1e-5, atol=1e-6
        )

    def test_windows_route_independently(self):
        """Changing a child only changes the parents of windows containing it."""
        layer = ConvCapsule2D(2, 3, 2, strides=1)
        before = to_numpy(layer(GRID))
        changed = GRID.copy()
        changed[:, 0, 0] += 5.0
        after = to_numpy(layer(changed))
        moved = np.any(np.abs(after - before) > 1e-6, axis=(0, 3, 4))
        expected = np.zeros((4, 4), bool)
        expected[0, 0] = True
        np.testing.assert_array_equal(moved, expected)

    def test_custom_router_round_trips(self):
        layer = ConvCapsule2D(2, 3, router=DynamicRouting(iterations=1, agreement="cosine"))
        restored = ConvCapsule2D.from_config(layer.get_config())
        assert restored.router.agreement == "cosine" and restored.router.iterations == 1

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"num_capsules": 0}, "num_capsules=0"),
            ({"capsule_dim": 0}, "capsule_dim=0"),
            ({"kernel_size": (3, 0)}, "kernel_size"),
            ({"strides": 0}, "strides=0"),
            ({"padding": "full"}, "padding='full'"),
            ({"router": "emm"}, "router='emm'"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            ConvCapsule2D(**{"num_capsules": 2, "capsule_dim": 4, **kwargs})

    def test_input_errors(self):
        with pytest.raises(ValueError, match="kernel_size=\\(6, 6\\)"):
            ConvCapsule2D(2, 4, 6)(keras.Input((5, 5, 2, 3)))
        with pytest.raises(ValueError, match="poses.shape"):
            ConvCapsule2D(2, 4)(keras.Input((5, 5, 3)))
        with pytest.raises(ValueError, match="grid"):
            ConvCapsule2D(2, 4)(keras.Input((None, 5, 2, 3)))
        with pytest.raises(ValueError, match="activations.shape"):
            ConvCapsule2D(2, 4)([keras.Input((5, 5, 2, 3)), keras.Input((5, 5, 3))])


class TestConvCapsule1D(LayerTestCase):
    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            ConvCapsule1D,
            {"num_capsules": 2, "capsule_dim": 4, "kernel_size": 3},
            SEQUENCE,
            {"kernel": ["kernel"]},
        )

    def test_layer_on_a_plain_sequence(self):
        self.run_layer_test(
            ConvCapsule1D,
            {"num_capsules": 2, "capsule_dim": 4, "kernel_size": 3, "strides": 2},
            SEQUENCE,
            (2, 3, 2, 4),
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
        )

    def test_layer_with_types_and_activations(self):
        x = RNG.normal(size=(2, 6, 2, 3)).astype("float32")
        a = RNG.uniform(size=(2, 6, 2)).astype("float32")
        self.run_layer_test(
            ConvCapsule1D,
            {
                "num_capsules": 2,
                "capsule_dim": 4,
                "kernel_size": 2,
                "padding": "same",
                "router": EM2,
                "return_activations": True,
            },
            [x, a],
            ((2, 6, 2, 4), (2, 6, 2)),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=3,
            expected_num_non_trainable_weights=0,
        )

    def test_plain_sequence_is_one_type(self):
        layer = ConvCapsule1D(2, 4, 3)
        typed = ConvCapsule1D(2, 4, 3)
        layer.build(SEQUENCE.shape)
        assert tuple(layer.kernel.shape) == (3, 1, 2, 3, 4)
        typed.build(SEQUENCE[:, :, None].shape)
        typed.kernel.assign(to_numpy(layer.kernel).astype("float32"))
        np.testing.assert_allclose(
            to_numpy(typed(SEQUENCE[:, :, None])), to_numpy(layer(SEQUENCE)), rtol=1e-6
        )

    def test_kernel_larger_than_sequence(self):
        with pytest.raises(ValueError, match="kernel_size=\\(8,\\)"):
            ConvCapsule1D(2, 4, 8)(keras.Input((7, 3)))


def test_exported():
    assert keras_capsules.ConvCapsule2D is ConvCapsule2D
    assert keras_capsules.ConvCapsule1D is ConvCapsule1D


def test_default_routers_follow_the_layer_policy():
    from keras_capsules.layers import ClassMatrixCapsule, ConvCapsule2D, ConvMatrixCapsule

    for layer in (
        ConvCapsule2D(2, 4, dtype="mixed_float16"),
        ConvMatrixCapsule(2, dtype="mixed_float16"),
        ClassMatrixCapsule(3, dtype="mixed_float16"),
    ):
        assert layer.router.dtype_policy.name == "mixed_float16"
