"""Renamed arguments and attributes: ClassMatrixCapsule(num_capsules),
MatrixCapsNet's layer sizes, `digit_capsules`, the Householder weight,
`Capsule.votes` and `routing_coefficients` of orthogonal capsules."""

import warnings

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.models import CapsuleClassifier
from tests.parity.backend_grad import to_numpy
from tests.reference import attention as ref
from tests.reference.dynamic import capsule_votes, dynamic_routing

SIZES = dict(conv_filters=4, primary_capsules=2, conv_capsules1=2, conv_capsules2=3)
PAPER_SIZES = dict(A=4, B=2, C=2, D=3)


def test_class_matrix_capsule_num_classes_is_deprecated():
    with pytest.warns(DeprecationWarning, match="num_capsules"):
        layer = kc.ClassMatrixCapsule(num_classes=3)
    assert layer.num_capsules == 3
    config = layer.get_config()
    assert config["num_capsules"] == 3 and "num_classes" not in config
    with pytest.raises(ValueError, match="num_classes=0"):
        kc.ClassMatrixCapsule(num_classes=0)
    with pytest.raises(ValueError, match="num_capsules=3, num_classes=4"):
        kc.ClassMatrixCapsule(3, num_classes=4)


def test_class_matrix_capsule_old_config_loads_silently():
    config = kc.ClassMatrixCapsule(3).get_config()
    config["num_classes"] = config.pop("num_capsules")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        layer = kc.ClassMatrixCapsule.from_config(config)
    assert layer.num_capsules == 3


def test_matrix_capsnet_paper_letters_are_deprecated():
    with pytest.warns(DeprecationWarning, match="conv_filters"):
        model = kc.MatrixCapsNet(**PAPER_SIZES, iterations=1)
    config = model.get_config()
    assert {k: config[k] for k in SIZES} == SIZES
    assert not set(PAPER_SIZES) & set(config)
    assert model.network.get_layer("conv").filters == 4
    assert model.network.get_layer("conv_capsules2").num_capsules == 3
    with pytest.raises(ValueError, match="conv_filters=0"):
        kc.MatrixCapsNet(conv_filters=0)
    with pytest.raises(ValueError, match="D=0"):
        kc.MatrixCapsNet(D=0)


def test_matrix_capsnet_old_config_loads_silently():
    model = kc.MatrixCapsNet(**SIZES, iterations=1)
    config = model.get_config()
    for old, new in zip(PAPER_SIZES, SIZES):
        config[old] = config.pop(new)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        restored = kc.MatrixCapsNet.from_config(config)
    assert restored.count_params() == model.count_params()
    assert restored.get_config() == model.get_config()


def test_new_names_raise_no_deprecation_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        kc.MatrixCapsNet(**SIZES, iterations=1)
        kc.ClassMatrixCapsule(2)


def test_digit_capsules_layer_is_named_as_the_attribute():
    models = [
        kc.CapsNet((20, 20, 1), 3, conv_filters=4, primary_capsules=2, primary_dim=4,
                   capsule_dim=4, decoder_units=(8,)),
        kc.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,)),
    ]
    for model in models:
        assert model.digit_capsules.name == "digit_capsules"


def test_householder_weight_has_one_name():
    dense = kc.Capsule(3, 4, orthogonal=True)
    dense.build((None, 5, 6))
    conv = kc.ConvCapsule2D(2, 4, 2, orthogonal=True)
    conv.build((None, 4, 4, 2, 6))
    for layer in (dense, conv):
        assert layer.householder.path.endswith("householder")
        assert [w.path for w in layer.weights] == [layer.householder.path]
        assert not hasattr(layer, "kernel")


def test_householder_orthogonal_stays_exported_from_layers():
    assert kc.layers.householder_orthogonal is kc.ops.householder_orthogonal


@pytest.mark.parametrize("orthogonal", [False, True])
@pytest.mark.parametrize("share_weights", [False, True])
def test_capsule_votes(orthogonal, share_weights):
    layer = kc.Capsule(3, 4, orthogonal=orthogonal, share_weights=share_weights)
    poses = np.random.default_rng(0).normal(size=(2, 5, 6)).astype("float32")
    layer.build(poses.shape)
    weight = to_numpy(layer.householder if orthogonal else layer.kernel).astype("float64")
    kernel = ref.householder_orthogonal(weight, 6, 4) if orthogonal else weight
    np.testing.assert_allclose(to_numpy(layer.votes(poses)), capsule_votes(poses, kernel),
                               rtol=1e-5, atol=1e-5)


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
        to_numpy(model.digit_capsules.householder).astype("float64"), 4, 6)
    expected = dynamic_routing(capsule_votes(children, transforms))[2]
    c = to_numpy(model.routing_coefficients(images))
    assert c.shape == (2, 4 * 4 * 2, 3)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-6)
