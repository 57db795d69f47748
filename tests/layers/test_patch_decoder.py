"""PatchDecoder (`layers/patch_decoder.py`), PointCapsNet's decoder: the
layer harness, its exports, and `patches=`, the old name of `num_patches`."""

import warnings

import keras
import numpy as np
import pytest

import keras_capsules
from keras_capsules.layers import PatchDecoder
from tests.test_case import LayerTestCase, to_numpy

LATENT = np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")
GRID = np.random.default_rng(1).uniform(size=(2, 3, 4, 2)).astype("float32")


class TestPatchDecoder(LayerTestCase):
    def test_layer(self):
        self.run_layer_test(
            PatchDecoder,
            {"num_patches": 3, "seed": 0},
            LATENT,
            (2, 12, 3),
            run_training_check=False,
            expected_num_trainable_weights=14,
            expected_num_non_trainable_weights=6,
        )


def test_models_and_the_package_export_the_same_class():
    assert keras_capsules.models.PatchDecoder is PatchDecoder
    assert keras_capsules.PatchDecoder is PatchDecoder


def _config(layer):
    return {k: v for k, v in layer.get_config().items() if k != "name"}


def test_the_old_keyword_warns_and_gives_the_same_layer():
    message = r"PatchDecoder\(patches=\) is renamed num_patches="
    with pytest.warns(DeprecationWarning, match=message) as caught:
        old = PatchDecoder(patches=3, seed=0)
    assert caught[0].filename == __file__  # points at the caller
    new = PatchDecoder(num_patches=3, seed=0)
    assert old.num_patches == 3 and old.patches == 3
    assert _config(old) == _config(new)
    assert "patches" not in old.get_config()
    old.build(LATENT.shape)
    new.build(LATENT.shape)
    new.set_weights(old.get_weights())
    np.testing.assert_array_equal(
        to_numpy(old(LATENT, grid=GRID)), to_numpy(new(LATENT, grid=GRID))
    )


def test_both_names_at_once_are_refused():
    with pytest.raises(ValueError, match="`patches` is the old name of `num_patches`"):
        PatchDecoder(3, patches=3)


def test_a_config_saved_under_the_old_name_loads():
    config = PatchDecoder(num_patches=3, seed=0, name="decoder").get_config()
    old = {k: v for k, v in config.items() if k != "num_patches"}
    old["patches"] = 3
    # As a 0.2.0 file names it: the class under its old module.
    saved = {
        "module": "keras_capsules.models.point_capsnet",
        "class_name": "PatchDecoder",
        "config": old,
        "registered_name": "keras_capsules>PatchDecoder",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # loads silently or warns
        loaded = keras.saving.deserialize_keras_object(saved)
    assert isinstance(loaded, PatchDecoder)
    assert loaded.get_config() == config
