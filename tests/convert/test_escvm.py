"""convert.escvm and EfficientCapsNet.load_authors_weights on small synthetic
Keras 2 weights files: every name and shape checked, layouts mapped."""

import h5py
import numpy as np
import pytest

from keras_capsules.convert import escvm
from keras_capsules.models import EfficientCapsNet
from tests.test_case import to_numpy


def released_like(seed=0):
    """Random weights with the released file's names and shapes."""
    rng = np.random.default_rng(seed)
    return {
        key: rng.normal(size=shape).astype("float32") for key, shape, _ in escvm.SMALLNORB_LAYOUT
    }


def write_keras2_weights(path, weights):
    """A weights file as Keras 2's `save_weights` wrote it (h5py)."""
    with h5py.File(path, "w") as f:
        models = sorted({key.split("/")[0] for key in weights})
        f.attrs["layer_names"] = np.array([m.encode() for m in models])
        f.attrs["backend"], f.attrs["keras_version"] = b"tensorflow", b"2.4.0"
        for model in models:
            group = f.create_group(model)
            names = [k.split("/", 1)[1] for k in weights if k.startswith(model + "/")]
            group.attrs["weight_names"] = np.array([n.encode() for n in names])
            for name in names:
                group.create_dataset(name, data=weights[f"{model}/{name}"])
    return path


_MODEL = []


def smallnorb_model():
    """One EfficientCapsNet(architecture="smallnorb") for the module (building is the cost)."""
    if not _MODEL:
        _MODEL.append(EfficientCapsNet(architecture="smallnorb"))
    return _MODEL[0]


def test_layouts_are_mapped():
    weights = released_like()
    ours = escvm.smallnorb_weights(weights)
    assert len(ours) == len(weights) == 30
    w, b = weights["CapsNet/digit_caps/W:0"], weights["CapsNet/digit_caps/b:0"]
    np.testing.assert_array_equal(ours["class_capsules/kernel"][3, 2], w[2, 3])
    np.testing.assert_array_equal(ours["class_capsules/router/priors"][3, 2], b[2, 3, 0])
    np.testing.assert_array_equal(
        ours["features/primary/kernel"], weights["CapsNet/conv2d_8/kernel:0"][:, :, 0]
    )
    np.testing.assert_array_equal(
        ours["features/norm2/gamma"], weights["CapsNet/instance_normalization_1/gamma:0"]
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda w: w.pop("Generator/conv2d_2/bias:0"),
            "Missing weight 'Generator/conv2d_2/bias:0'",
        ),
        (lambda w: w.update({"CapsNet/extra/kernel:0": np.zeros(3)}), "Unexpected weight"),
        (
            lambda w: w.update({"CapsNet/digit_caps/W:0": np.zeros((10, 16, 8, 16))}),
            r"'CapsNet/digit_caps/W:0'.*expected \(5, 16, 8, 16\), received \(10, 16, 8, 16\)",
        ),
    ],
)
def test_bad_files_are_refused(change, message):
    weights = released_like()
    change(weights)
    with pytest.raises(ValueError, match=message):
        escvm.smallnorb_weights(weights)


def test_load_authors_weights_sets_every_weight(tmp_path):
    weights = released_like()
    path = write_keras2_weights(tmp_path / "weights.h5", weights)
    model = smallnorb_model()
    model.load_authors_weights(str(path))
    variables = escvm.model_variables(model)
    assert len(variables) == 30
    for key, value in escvm.smallnorb_weights(weights).items():
        np.testing.assert_array_equal(to_numpy(variables[key]), value, err_msg=key)
    # Every trainable weight of the model comes from the file.
    assert {id(v) for v in model.trainable_weights} == {id(v) for v in variables.values()}


def test_load_authors_weights_refuses_a_bad_file_and_changes_nothing(tmp_path):
    model = smallnorb_model()
    before = [to_numpy(w) for w in model.weights]
    weights = released_like()
    weights["Generator/dense/kernel:0"] = np.zeros((80, 32), "float32")
    path = write_keras2_weights(tmp_path / "weights.h5", weights)
    with pytest.raises(ValueError, match=r"'Generator/dense/kernel:0'.*\(80, 64\).*\(80, 32\)"):
        model.load_authors_weights(str(path))
    del weights["Generator/dense/kernel:0"]
    path = write_keras2_weights(tmp_path / "missing.h5", weights)
    with pytest.raises(ValueError, match="Missing weight 'Generator/dense/kernel:0'"):
        model.load_authors_weights(str(path))
    for b, a in zip(before, model.weights):
        np.testing.assert_array_equal(to_numpy(a), b)


def test_load_authors_weights_needs_the_authors_model(tmp_path):
    path = write_keras2_weights(tmp_path / "weights.h5", released_like())
    with pytest.raises(ValueError, match='architecture="smallnorb"'):
        EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,)).load_authors_weights(str(path))
    other = EfficientCapsNet((24, 24, 2), 5, architecture="smallnorb")
    primary = r"'CapsNet/conv2d_8/kernel:0', for 'features/primary/kernel', has shape"
    with pytest.raises(ValueError, match=primary + r" \(8, 8, 128\).*\(2, 2, 128\)"):
        other.load_authors_weights(str(path))
