"""keras_capsules.convert.heinsen on a tiny synthetic state dict (no torch):
layouts, and a ValueError naming the key for every mismatch."""

import numpy as np
import pytest

from keras_capsules.convert.heinsen import heinsen_mapping, heinsen_weights

SIZES = dict(num_classes=3, parts=2, channels=4)


def _state(seed=0):
    rng = np.random.default_rng(seed)
    state = {
        k: rng.normal(size=s).astype("float32") for k, (_, s, _) in heinsen_mapping(**SIZES).items()
    }
    state["convolve.0.num_batches_tracked"] = np.array(7)
    state["routings.1.CONST_R_init"] = np.array(1 / 3, "float32")
    return state


def test_layouts():
    state = _state()
    weights = heinsen_weights(state, **SIZES)
    assert len(weights) == len(heinsen_mapping(**SIZES)) == 6 * 6 + 2 * 6 + 2 * 4
    # OIHW -> HWIO: kernel[h, w, i, o] == weight[o, i, h, w].
    np.testing.assert_array_equal(
        weights["conv2/kernel"], state["convolve.4.weight"].transpose(2, 3, 1, 0)
    )
    assert weights["conv1/kernel"].shape == (3, 3, 4, 4)  # 2 image + 2 grid channels
    assert weights["poses_conv/kernel"].shape == (1, 1, 4, 2 * 16)
    np.testing.assert_array_equal(weights["bn3/moving_variance"], state["convolve.6.running_var"])
    np.testing.assert_array_equal(weights["scores_bn/gamma"], state["compute_a.0.weight"])
    # The shared routing's leading axis of size 1 goes; betas keep theirs.
    np.testing.assert_array_equal(weights["part_capsules/kernel"], state["routings.0.W"][0])
    assert weights["part_capsules/bias"].shape == (2, 4, 4)
    assert weights["part_capsules/beta_use"].shape == (1, 2)
    assert weights["class_capsules/kernel"].shape == (2, 3, 4, 4)
    assert weights["class_capsules/beta_ign"].shape == (2, 3)
    assert all(w.dtype == np.float32 for w in weights.values())


def test_missing_key():
    state = _state()
    del state["routings.0.beta_use"]
    with pytest.raises(
        ValueError, match=r"lacks the key 'routings.0.beta_use' \(of shape \(1, 2\)\)"
    ):
        heinsen_weights(state, **SIZES)


def test_wrong_shape():
    state = _state()
    state["convolve.7.weight"] = state["convolve.7.weight"][:, :, :2]
    with pytest.raises(
        ValueError,
        match=r"'convolve.7.weight'.*expected \(4, 4, 3, 3\)\. "
        r"Received: convolve.7.weight.shape=\(4, 4, 2, 3\)",
    ):
        heinsen_weights(state, **SIZES)


def test_other_sizes_and_unexpected_keys():
    with pytest.raises(ValueError, match=r"'routings.1.W'.*expected \(2, 5, 4, 4\)"):
        heinsen_weights(_state(), num_classes=5, parts=2, channels=4)
    state = _state()
    state["decoder.weight"] = np.zeros(3)
    with pytest.raises(ValueError, match="has the key 'decoder.weight'"):
        heinsen_weights(state, **SIZES)
