"""LocalCapsule2D / LocalDeconvCapsule2D: shapes, config, routers, training, errors."""

import keras
import numpy as np
import pytest

from keras_capsules.layers import LocalCapsule2D, LocalDeconvCapsule2D
from keras_capsules.routing import DynamicRouting, EMRouting
from tests.reference import segmentation_capsule as ref
from tests.test_case import LayerTestCase, to_numpy

RNG = np.random.default_rng(0)
GRID = (RNG.normal(size=(2, 6, 6, 3, 4)) * 0.3).astype("float32")
DYNAMIC2 = keras.saving.serialize_keras_object(DynamicRouting(iterations=2))
EM2 = keras.saving.serialize_keras_object(EMRouting(iterations=2))


class TestLocalCapsule2D(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            LocalCapsule2D,
            {
                "num_capsules": 2,
                "capsule_dim": 5,
                "kernel_size": 3,
                "strides": 2,
                "router": DYNAMIC2,
            },
            GRID,
            (2, 3, 3, 2, 5),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            LocalCapsule2D,
            {"num_capsules": 2, "capsule_dim": 5, "kernel_size": 3},
            GRID,
            {"kernel": ["kernel"]},
        )

    def test_em_router_and_activations(self):
        self.run_layer_test(
            LocalCapsule2D,
            {
                "num_capsules": 2,
                "capsule_dim": 4,
                "kernel_size": 3,
                "router": EM2,
                "return_activations": True,
                "use_bias": False,
            },
            GRID,
            ((2, 6, 6, 2, 4), (2, 6, 6, 2)),
            run_mixed_precision_check=False,
            expected_num_trainable_weights=3,
            expected_num_non_trainable_weights=0,
        )

    @pytest.mark.parametrize("implementation", ["conv", "matmul", "hybrid", "space_to_depth"])
    def test_implementations_agree_with_the_reference(self, implementation):
        layer = LocalCapsule2D(
            2, 5, 3, strides=2, implementation=implementation, bias_initializer="random_normal"
        )
        poses, activations = layer(GRID), None
        expected, _ = ref.local_capsule(
            GRID.astype("float64"), to_numpy(layer.kernel), to_numpy(layer.bias), 2, (2, 2), "same"
        )
        np.testing.assert_allclose(to_numpy(poses), expected, rtol=1e-5, atol=1e-6)
        del activations

    def test_kernel_does_not_grow_with_child_types(self):
        """One kernel for every child type (the authors' layer)."""
        a, b = LocalCapsule2D(2, 5, 3), LocalCapsule2D(2, 5, 3)
        a.build((None, 6, 6, 1, 4))
        b.build((None, 6, 6, 7, 4))
        assert a.count_params() == b.count_params() == 3 * 3 * 4 * 10 + 10

    def test_routing_is_per_position_over_child_types(self):
        """The router sees each output position's child types as its
        children, and one position's votes do not reach another's parents."""
        layer = LocalCapsule2D(3, 4, 1)
        layer.build(GRID.shape)
        assert tuple(layer.votes(GRID).shape) == (2 * 6 * 6, 3, 3, 4)
        changed = GRID.copy()
        changed[:, 0, 0] += 1.0
        moved = to_numpy(layer(changed)) != to_numpy(layer(GRID))
        assert moved[:, 0, 0].all() and not moved[:, 1:].any() and not moved[:, :, 1:].any()

    def test_default_parents_start_near_the_squash_knee(self):
        poses = keras.ops.convert_to_numpy(LocalCapsule2D(4, 8, 5)(GRID))
        lengths = np.linalg.norm(poses, axis=-1)
        assert 0.1 < np.median(lengths) < 0.9, np.median(lengths)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"num_capsules": 0}, "Received: num_capsules=0"),
            ({"kernel_size": (3, 0)}, "Received: kernel_size=(3, 0)"),
            ({"padding": "full"}, "Received: padding='full'"),
            ({"implementation": "fft"}, "Received: implementation='fft'"),
            ({"router": "nope"}, "nope"),
        ],
    )
    def test_errors(self, kwargs, message):
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            LocalCapsule2D(**{"num_capsules": 2, "capsule_dim": 4, **kwargs})

    def test_input_errors(self):
        with pytest.raises(ValueError, match="types, dim"):
            LocalCapsule2D(2, 4).build((None, 6, 6, 4))
        with pytest.raises(ValueError, match="known grid"):
            LocalCapsule2D(2, 4).build((None, None, 6, 2, 4))
        with pytest.raises(ValueError, match="larger than"):
            LocalCapsule2D(2, 4, 7, padding="valid").build((None, 6, 6, 2, 4))


class TestLocalDeconvCapsule2D(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            LocalDeconvCapsule2D,
            {"num_capsules": 2, "capsule_dim": 5, "router": DYNAMIC2},
            GRID,
            (2, 12, 12, 2, 5),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )

    def test_weight_arguments(self):
        self.run_weight_arguments_test(
            LocalDeconvCapsule2D,
            {"num_capsules": 2, "capsule_dim": 5},
            GRID,
            {"kernel": ["kernel"]},
        )

    @pytest.mark.parametrize(
        "kernel_size, strides, padding", [(4, 2, "same"), (3, 2, "valid"), (3, 3, "same")]
    )
    def test_matches_the_reference(self, kernel_size, strides, padding):
        layer = LocalDeconvCapsule2D(
            2, 5, kernel_size, strides=strides, padding=padding, bias_initializer="random_normal"
        )
        poses = layer(GRID)
        expected, _ = ref.local_capsule(
            GRID.astype("float64"),
            to_numpy(layer.kernel),
            to_numpy(layer.bias),
            2,
            (strides, strides),
            padding,
            transposed=True,
        )
        assert tuple(poses.shape) == expected.shape == layer.compute_output_shape(GRID.shape)
        np.testing.assert_allclose(to_numpy(poses), expected, rtol=1e-5, atol=1e-6)


def test_exported():
    import keras_capsules

    assert keras_capsules.layers.LocalCapsule2D is LocalCapsule2D
    assert keras_capsules.layers.LocalDeconvCapsule2D is LocalDeconvCapsule2D
