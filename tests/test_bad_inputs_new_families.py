"""Bad input on the newer layer families (1-D and 3-D primaries, sets,
points, vector routing, 3-D and 1-D convolutional capsules, quaternion
capsules), and non-bool flags on every layer constructor.

One row per case: the layer's constructor kwargs, the good input it is
built with (`None`: the bad input is the first call, or the bad kwarg
fails the construction), the bad input, the expected error type and a
regex of its words. A built layer refuses other sizes with Keras's own
InputSpec error (the layer, the axis, the size expected and the shape
received), set in `build` by `validation.built_input_spec`; the rest are
this library's ValueErrors. As in `test_bad_inputs`, every `keras.ops`
function raises while the bad call runs, so a refusal that comes after
any computation fails the test.
"""

import re

import numpy as np
import pytest

import keras_capsules as kc
from tests.test_bad_inputs import _forbid_ops


def ones(*shape):
    return np.ones(shape, "float32")


def quaternion_inputs(patches=2, neighbors=3, in_caps=1, activation_types=None):
    poses = np.zeros((1, patches, neighbors, in_caps, 4), "float32")
    poses[..., 0] = 1.0
    activation_types = in_caps if activation_types is None else activation_types
    return [
        ones(1, patches, neighbors, 3),
        poses,
        ones(1, patches, neighbors, activation_types),
    ]


def spec_error(index, axis, value, shape):
    """The words of Keras's InputSpec error for input `index`."""
    return (
        rf"Input {index} .*incompatible with the layer: expected axis {axis} of input "
        rf"shape to have value {value}, but received input with shape {re.escape(str(shape))}"
    )


def construction(kwarg, value):
    return rf"`{kwarg}` must be True or False\. Received: {kwarg}={re.escape(repr(value))}"


# (case id, layer class, constructor kwargs, good input or None, bad input
#  or None (bad kwargs), error type, regex)
CASES = [
    # VectorRouting: the input_dim (and num_inputs) it was built for.
    (
        "vector-routing-built-dim",
        kc.VectorRouting,
        dict(num_capsules=2, capsule_dim=3),
        ones(2, 4, 5),
        ones(2, 4, 6),
        ValueError,
        spec_error(0, -1, 5, (2, 4, 6)),
    ),
    (
        "vector-routing-built-num-inputs",
        kc.VectorRouting,
        dict(num_capsules=2, capsule_dim=3, num_inputs=4),
        ones(2, 4, 5),
        ones(2, 3, 5),
        ValueError,
        spec_error(0, 1, 4, (2, 3, 5)),
    ),
    (
        "vector-routing-normalize-flag",
        kc.VectorRouting,
        dict(num_capsules=2, capsule_dim=3, normalize="no"),
        None,
        None,
        ValueError,
        construction("normalize", "no"),
    ),
    # SetPrimaryCapsule: the features it was built for.
    (
        "set-primary-built-features",
        kc.SetPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=3),
        ones(2, 4, 5),
        ones(2, 4, 6),
        ValueError,
        spec_error(0, -1, 5, (2, 4, 6)),
    ),
    (
        "set-primary-squash-flag",
        kc.SetPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=3, squash="no"),
        None,
        None,
        ValueError,
        construction("squash", "no"),
    ),
    # PrimaryCapsule1D: the channels it was built for.
    (
        "primary-1d-built-channels",
        kc.PrimaryCapsule1D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=3),
        ones(1, 6, 3),
        ones(1, 6, 5),
        ValueError,
        spec_error(0, -1, 3, (1, 6, 5)),
    ),
    (
        "primary-1d-squash-flag",
        kc.PrimaryCapsule1D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=3, squash="no"),
        None,
        None,
        ValueError,
        construction("squash", "no"),
    ),
    # PrimaryCapsule3D: the channels it was built for.
    (
        "primary-3d-built-channels",
        kc.PrimaryCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        ones(1, 3, 3, 3, 2),
        ones(1, 3, 3, 3, 3),
        ValueError,
        spec_error(0, -1, 2, (1, 3, 3, 3, 3)),
    ),
    (
        "primary-3d-grid-flag",
        kc.PrimaryCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2, grid=1),
        None,
        None,
        ValueError,
        construction("grid", 1),
    ),
    (
        "primary-3d-squash-flag",
        kc.PrimaryCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2, squash="no"),
        None,
        None,
        ValueError,
        construction("squash", "no"),
    ),
    # ConvCapsule3D: the capsule types and pose size it was built for, and
    # each input of [poses, activations].
    (
        "conv-3d-built-types",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        ones(1, 2, 2, 2, 3, 4),
        ones(1, 2, 2, 2, 5, 4),
        ValueError,
        spec_error(0, -2, 3, (1, 2, 2, 2, 5, 4)),
    ),
    (
        "conv-3d-built-pose-size",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        ones(1, 2, 2, 2, 3, 4),
        ones(1, 2, 2, 2, 3, 8),
        ValueError,
        spec_error(0, -1, 4, (1, 2, 2, 2, 3, 8)),
    ),
    (
        "conv-3d-built-activation-types",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2, router=kc.EMRouting()),
        [ones(1, 2, 2, 2, 3, 4), ones(1, 2, 2, 2, 3)],
        [ones(1, 2, 2, 2, 3, 4), ones(1, 2, 2, 2, 5)],
        ValueError,
        spec_error(1, -1, 3, (1, 2, 2, 2, 5)),
    ),
    (
        "conv-3d-built-poses-of-list",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2, router=kc.EMRouting()),
        [ones(1, 2, 2, 2, 3, 4), ones(1, 2, 2, 2, 3)],
        [ones(1, 2, 2, 2, 5, 4), ones(1, 2, 2, 2, 3)],
        ValueError,
        spec_error(0, -2, 3, (1, 2, 2, 2, 5, 4)),
    ),
    (
        "conv-3d-orthogonal-flag",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, orthogonal="no"),
        None,
        None,
        ValueError,
        construction("orthogonal", "no"),
    ),
    (
        "conv-3d-return-activations-flag",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, return_activations="yes"),
        None,
        None,
        ValueError,
        construction("return_activations", "yes"),
    ),
    # ConvCapsule1D (the same base; its spec is of the sequences given).
    (
        "conv-1d-built-types",
        kc.ConvCapsule1D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        ones(1, 3, 3, 4),
        ones(1, 3, 2, 4),
        ValueError,
        spec_error(0, -2, 3, (1, 3, 2, 4)),
    ),
    # QuaternionCapsule: in_caps after build, each input of the three, and
    # empty patch or neighbour axes.
    (
        "quaternion-built-in-caps",
        kc.QuaternionCapsule,
        dict(num_capsules=2),
        quaternion_inputs(),
        quaternion_inputs(in_caps=2),
        ValueError,
        spec_error(1, -2, 1, (1, 2, 3, 2, 4)),
    ),
    (
        "quaternion-built-activation-types",
        kc.QuaternionCapsule,
        dict(num_capsules=2),
        quaternion_inputs(),
        quaternion_inputs(activation_types=2),
        ValueError,
        spec_error(2, -1, 1, (1, 2, 3, 2)),
    ),
    (
        "quaternion-offsets-last-axis",
        kc.QuaternionCapsule,
        dict(num_capsules=2),
        None,
        [ones(1, 2, 3, 4), *quaternion_inputs()[1:]],
        ValueError,
        re.escape("offsets.shape=(1, 2, 3, 4)"),
    ),
    (
        "quaternion-zero-patches",
        kc.QuaternionCapsule,
        dict(num_capsules=2),
        None,
        quaternion_inputs(patches=0),
        ValueError,
        r"QuaternionCapsule needs at least one patch\. Received: poses\.shape=\(1, 0, 3, 1, 4\)",
    ),
    (
        "quaternion-zero-neighbors",
        kc.QuaternionCapsule,
        dict(num_capsules=2),
        None,
        quaternion_inputs(neighbors=0),
        ValueError,
        r"QuaternionCapsule needs at least one neighbor\. Received: poses\.shape=\(1, 2, 0, 1, 4\)",
    ),
    # PointPrimaryCapsule: no points (before and after build), features.
    (
        "point-primary-zero-points",
        kc.PointPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=4),
        None,
        ones(2, 0, 3),
        ValueError,
        r"PointPrimaryCapsule needs at least one point\. Received: inputs\.shape=\(2, 0, 3\)",
    ),
    (
        "point-primary-built-zero-points",
        kc.PointPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=4, batch_norm=False),
        ones(2, 5, 3),
        ones(2, 0, 3),
        ValueError,
        r"needs at least one point\. Received: inputs\.shape=\(2, 0, 3\)",
    ),
    (
        "point-primary-built-features",
        kc.PointPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=4, batch_norm=False),
        ones(2, 5, 3),
        ones(2, 5, 4),
        ValueError,
        spec_error(0, -1, 3, (2, 5, 4)),
    ),
    (
        "point-primary-batch-norm-flag",
        kc.PointPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=4, batch_norm="yes"),
        None,
        None,
        ValueError,
        construction("batch_norm", "yes"),
    ),
]

# Every boolean flag of every layer constructor, given a string or a number.
FLAGS = [
    (kc.Capsule, dict(num_capsules=2, capsule_dim=4), "share_weights"),
    (kc.Capsule, dict(num_capsules=2, capsule_dim=4), "orthogonal"),
    (kc.Capsule, dict(num_capsules=2, capsule_dim=4), "return_activations"),
    (kc.ConvCapsule1D, dict(num_capsules=2, capsule_dim=4), "orthogonal"),
    (kc.ConvCapsule2D, dict(num_capsules=2, capsule_dim=4), "return_activations"),
    (kc.CapsuleAttention, dict(), "squash_output"),
    (kc.ClassMatrixCapsule, dict(num_capsules=2), "coordinate_addition"),
    (kc.HeinsenCapsule, dict(num_capsules=2, capsule_dim=4), "share_weights"),
    (kc.HeinsenCapsule, dict(num_capsules=2, capsule_dim=4), "return_variances"),
    (kc.LocalCapsule2D, dict(num_capsules=2, capsule_dim=4), "return_activations"),
    (kc.LocalCapsule2D, dict(num_capsules=2, capsule_dim=4), "use_bias"),
    (kc.LocalDeconvCapsule2D, dict(num_capsules=2, capsule_dim=4), "use_bias"),
    (kc.PrimaryCapsule, dict(num_capsules=2, capsule_dim=4, kernel_size=3), "squash"),
    (kc.PointPrimaryCapsule, dict(num_capsules=2, capsule_dim=4), "squash"),
    (kc.VectorRouting, dict(num_capsules=2, capsule_dim=4), "normalize"),
]
for cls, kwargs, flag in FLAGS:
    for value in ("no", 0):
        CASES.append(
            (
                f"{cls.__name__}-{flag}-{value!r}",
                cls,
                {**kwargs, flag: value},
                None,
                None,
                ValueError,
                construction(flag, value),
            )
        )


def test_the_table_is_unique():
    ids = [case[0] for case in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(
    "cls, kwargs, good, bad, error, pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_refused_before_computation(
    cls, kwargs, good, bad, error, pattern, monkeypatch
):
    if bad is None:  # a bad constructor argument
        with monkeypatch.context() as patch:
            _forbid_ops(patch)
            with pytest.raises(error, match=pattern):
                cls(**kwargs)
        return
    layer = cls(**kwargs)
    if good is not None:
        layer(good)  # builds and computes
    with monkeypatch.context() as patch:
        _forbid_ops(patch)
        with pytest.raises(error, match=pattern):
            layer(bad)
