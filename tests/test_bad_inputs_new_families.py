"""Bad input on the newer layer families (1-D and 3-D primaries, sets,
points, vector routing, 3-D and 1-D convolutional capsules, quaternion
capsules, local frames) and their ready models, and non-bool flags on every
layer constructor.

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

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.models.ready_models import _point_capsnet, _quaternion_classifier, point_classifier
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


def rank_error(ndim, found, shape):
    """The words of Keras's InputSpec error for a wrong rank."""
    return (
        rf"Input 0 .*incompatible with the layer: expected ndim={ndim}, found ndim={found}\. "
        rf"Full shape received: {re.escape(str(shape))}"
    )


def empty(layer, what, name, shape):
    """The words of `validation.non_empty`."""
    return rf"{layer} needs at least one {what}\. Received: {name}\.shape={re.escape(str(shape))}"


def empty_grid(layer, grid, shape):
    """The words of `validation.check_kernel_fits` for an empty grid axis."""
    return (
        rf"{layer} needs at least one position on each axis of its {grid} grid\. "
        rf"Received: grid={re.escape(str(shape))}"
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

# Wrong ranks (before and after build) and zero sizes: every new layer.
CASES += [
    # VectorRouting: zero features are refused; zero inputs route to
    # zeros (tests/test_masked_and_nonfinite_inputs.py).
    (
        "vector-routing-rank-2",
        kc.VectorRouting,
        dict(num_capsules=2, capsule_dim=3),
        None,
        ones(2, 4),
        ValueError,
        rank_error(3, 2, (2, 4)),
    ),
    (
        "vector-routing-built-rank-4",
        kc.VectorRouting,
        dict(num_capsules=2, capsule_dim=3),
        ones(2, 4, 5),
        ones(2, 4, 5, 1),
        ValueError,
        rank_error(3, 4, (2, 4, 5, 1)),
    ),
    (
        "vector-routing-zero-features",
        kc.VectorRouting,
        dict(num_capsules=2, capsule_dim=3),
        None,
        ones(2, 4, 0),
        ValueError,
        empty("VectorRouting", "feature", "inputs", (2, 4, 0)),
    ),
    (
        "vector-routing-built-zero-features",
        kc.VectorRouting,
        dict(num_capsules=2, capsule_dim=3),
        ones(2, 4, 5),
        ones(2, 4, 0),
        ValueError,
        spec_error(0, -1, 5, (2, 4, 0)),
    ),
    (
        "vector-routing-built-zero-inputs-of-num-inputs",
        kc.VectorRouting,
        dict(num_capsules=2, capsule_dim=3, num_inputs=4),
        ones(2, 4, 5),
        ones(2, 0, 5),
        ValueError,
        spec_error(0, 1, 4, (2, 0, 5)),
    ),
    # SetPrimaryCapsule: zero features are refused; an empty set gives no
    # capsules (tests/test_masked_and_nonfinite_inputs.py).
    (
        "set-primary-rank-2",
        kc.SetPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=3),
        None,
        ones(2, 4),
        ValueError,
        rank_error(3, 2, (2, 4)),
    ),
    (
        "set-primary-built-rank-4",
        kc.SetPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=3),
        ones(2, 4, 5),
        ones(2, 4, 5, 1),
        ValueError,
        rank_error(3, 4, (2, 4, 5, 1)),
    ),
    (
        "set-primary-zero-features",
        kc.SetPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=3),
        None,
        ones(2, 4, 0),
        ValueError,
        empty("SetPrimaryCapsule", "feature", "inputs", (2, 4, 0)),
    ),
    # PrimaryCapsule1D: rank, zero channels, zero steps.
    (
        "primary-1d-rank-4",
        kc.PrimaryCapsule1D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=3),
        None,
        ones(1, 6, 3, 1),
        ValueError,
        rank_error(3, 4, (1, 6, 3, 1)),
    ),
    (
        "primary-1d-built-rank-2",
        kc.PrimaryCapsule1D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=3),
        ones(1, 6, 3),
        ones(1, 6),
        ValueError,
        rank_error(3, 2, (1, 6)),
    ),
    (
        "primary-1d-zero-channels",
        kc.PrimaryCapsule1D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=3),
        None,
        ones(1, 6, 0),
        ValueError,
        empty("PrimaryCapsule1D", "channel", "inputs", (1, 6, 0)),
    ),
    (
        "primary-1d-zero-steps",
        kc.PrimaryCapsule1D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=3, padding="same"),
        None,
        ones(1, 0, 3),
        ValueError,
        empty_grid("PrimaryCapsule1D", "sequence", (0,)),
    ),
    # PrimaryCapsule3D: rank, zero channels, an empty axis of the volume.
    (
        "primary-3d-rank-4",
        kc.PrimaryCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        None,
        ones(1, 3, 3, 2),
        ValueError,
        rank_error(5, 4, (1, 3, 3, 2)),
    ),
    (
        "primary-3d-built-rank-6",
        kc.PrimaryCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        ones(1, 3, 3, 3, 2),
        ones(1, 3, 3, 3, 2, 1),
        ValueError,
        rank_error(5, 6, (1, 3, 3, 3, 2, 1)),
    ),
    (
        "primary-3d-zero-channels",
        kc.PrimaryCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        None,
        ones(1, 3, 3, 3, 0),
        ValueError,
        empty("PrimaryCapsule3D", "channel", "inputs", (1, 3, 3, 3, 0)),
    ),
    (
        "primary-3d-zero-depth",
        kc.PrimaryCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2, padding="same"),
        None,
        ones(1, 0, 3, 3, 2),
        ValueError,
        empty_grid("PrimaryCapsule3D", "input", (0, 3, 3)),
    ),
    # ConvCapsule3D: rank, zero types, zero pose size, an empty grid axis.
    (
        "conv-3d-built-rank-5",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        ones(1, 2, 2, 2, 3, 4),
        ones(1, 2, 2, 3, 4),
        ValueError,
        rank_error(6, 5, (1, 2, 2, 3, 4)),
    ),
    (
        "conv-3d-zero-types",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        None,
        ones(1, 2, 2, 2, 0, 4),
        ValueError,
        empty("ConvCapsule3D", "capsule type", "poses", (1, 2, 2, 2, 0, 4)),
    ),
    (
        "conv-3d-zero-pose-size",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2),
        None,
        ones(1, 2, 2, 2, 3, 0),
        ValueError,
        empty("ConvCapsule3D", "pose dimension", "poses", (1, 2, 2, 2, 3, 0)),
    ),
    (
        "conv-3d-zero-types-of-list",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2, router=kc.EMRouting()),
        None,
        [ones(1, 2, 2, 2, 0, 4), ones(1, 2, 2, 2, 0)],
        ValueError,
        empty("ConvCapsule3D", "capsule type", "poses", (1, 2, 2, 2, 0, 4)),
    ),
    (
        "conv-3d-zero-depth",
        kc.ConvCapsule3D,
        dict(num_capsules=2, capsule_dim=4, kernel_size=2, padding="same"),
        None,
        ones(1, 0, 2, 2, 3, 4),
        ValueError,
        empty_grid("ConvCapsule3D", "capsule", (0, 2, 2)),
    ),
    # PointPrimaryCapsule: rank, zero features.
    (
        "point-primary-rank-2",
        kc.PointPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=4),
        None,
        ones(2, 5),
        ValueError,
        rank_error(3, 2, (2, 5)),
    ),
    (
        "point-primary-zero-features",
        kc.PointPrimaryCapsule,
        dict(num_capsules=2, capsule_dim=4),
        None,
        ones(2, 5, 0),
        ValueError,
        empty("PointPrimaryCapsule", "feature", "inputs", (2, 5, 0)),
    ),
    # LocalReferenceFrames: the last axis, the rank, too few points.
    (
        "frames-last-axis",
        kc.LocalReferenceFrames,
        dict(num_neighbors=4),
        None,
        ones(2, 8, 4),
        ValueError,
        re.escape("LocalReferenceFrames expects points of shape (batch, n, 3). ")
        + re.escape("Received: points.shape=(2, 8, 4)"),
    ),
    (
        "frames-rank-2",
        kc.LocalReferenceFrames,
        dict(num_neighbors=4),
        None,
        ones(2, 8),
        ValueError,
        re.escape("Received: points.shape=(2, 8)"),
    ),
    (
        "frames-zero-points",
        kc.LocalReferenceFrames,
        dict(num_neighbors=4),
        None,
        ones(2, 0, 3),
        ValueError,
        re.escape("needs at least num_neighbors=4 points. Received: points.shape=(2, 0, 3)"),
    ),
    # CrossAttentionRouting: heads that do not divide the votes' size.
    (
        "cross-attention-heads-do-not-divide",
        kc.Capsule,
        dict(num_capsules=2, capsule_dim=4, router=kc.CrossAttentionRouting(num_heads=3)),
        None,
        ones(2, 5, 4),
        ValueError,
        r"`num_heads` must divide the votes' dimension.*Received: ",
    ),
    (
        "quaternion-offsets-rank",
        kc.QuaternionCapsule,
        dict(num_capsules=2),
        None,
        [ones(1, 2, 3), *quaternion_inputs()[1:]],
        ValueError,
        re.escape("offsets.shape=(1, 2, 3)"),
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


@pytest.mark.one_backend  # checks made before any computation: the same Python on every backend
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


# The ready models of the new families: a wrong last axis, a wrong rank or a
# cloud of no points, given to `model(x)`, `predict`, `fit` or `evaluate`,
# is refused in the model's words before any computation (`check_inputs`),
# and the model still predicts and saves afterwards (on JAX a step that
# fails inside Keras's traced function would leave it unable to).
POINT_MODELS = {
    "PointCapsNet": _point_capsnet,
    "PointCapsuleClassifier": point_classifier("capsules"),
    "QuaternionCapsuleClassifier": _quaternion_classifier,
}
BAD_CLOUDS = {
    "last-axis": ones(2, 16, 4),
    "rank-2": ones(2, 16),
    "rank-4": ones(2, 16, 3, 1),
    "zero-points": ones(2, 0, 3),
}
ARGUMENT = {"call": "inputs", "predict": "x", "fit": "x", "evaluate": "x"}


def model_error(model, method, shape):
    if model == "QuaternionCapsuleClassifier" and method == "call":
        # Its own check, in scores_and_poses: at least as many points as it
        # takes patches, neighbours and frame neighbours.
        return (
            r"QuaternionCapsuleClassifier expects points of shape \(batch, n, 3\), n >= 8 "
            r"\(num_patches, patch_size, frame_neighbors\)\. "
            rf"Received: points\.shape={re.escape(str(shape))}"
        )
    return (
        rf"{model} expects point clouds of shape \(batch, n, 3\) with n >= 1\. "
        rf"Received: {ARGUMENT[method]}\.shape={re.escape(str(shape))}"
    )


MODEL_CASES = (
    [
        (f"{model}-{method}-{case}", model, method, x, model_error(model, method, x.shape))
        for model in POINT_MODELS
        for method in ARGUMENT
        for case, x in BAD_CLOUDS.items()
    ]
    + [
        (
            f"{model}-{method}-no-clouds",
            model,
            method,
            ones(0, 16, 3),
            rf"{model}\.{method} needs at least one input\. Received: x\.shape=\(0, 16, 3\)",
        )
        for model in POINT_MODELS
        for method in ("predict", "fit", "evaluate")
    ]
    + [
        (
            f"QuaternionCapsuleClassifier-{method}-fewer-points-than-patches",
            "QuaternionCapsuleClassifier",
            method,
            ones(2, 5, 3),
            r"QuaternionCapsuleClassifier expects points of shape \(batch, n, 3\), n >= 8 "
            r"\(num_patches, patch_size, frame_neighbors\)\. "
            rf"Received: {'points' if method == 'call' else 'x'}\.shape=\(2, 5, 3\)",
        )
        for method in ARGUMENT
    ]
)


def _run(model, method, x):
    if method == "call":
        return model(x)
    if method == "predict":
        return model.predict(x, verbose=0)
    y = x if model.num_classes is None else np.zeros((len(x),), "int32")
    return getattr(model, method)(x, y, verbose=0)


@pytest.fixture(scope="module")
def point_models():
    models = {}

    def get(name):
        if name not in models:
            keras.utils.set_random_seed(0)
            models[name] = POINT_MODELS[name]()
            models[name].compile()
        return models[name]

    return get


def test_the_model_table_is_unique():
    ids = [case[0] for case in MODEL_CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.one_backend  # checks made before any computation: the same Python on every backend
@pytest.mark.parametrize(
    "name, method, x, pattern", [c[1:] for c in MODEL_CASES], ids=[c[0] for c in MODEL_CASES]
)
def test_bad_inputs_to_ready_models_are_refused_before_computation(
    point_models, name, method, x, pattern, monkeypatch
):
    model = point_models(name)
    with monkeypatch.context() as patch:
        _forbid_ops(patch)
        with pytest.raises(ValueError, match=pattern):
            _run(model, method, x)


@pytest.mark.parametrize("name", list(POINT_MODELS))
def test_ready_models_work_after_a_refused_input(point_models, name, tmp_path):
    model = point_models(name)
    for method in ARGUMENT:
        with pytest.raises(ValueError):
            _run(model, method, BAD_CLOUDS["zero-points"])
    clouds = np.random.default_rng(0).normal(size=(2, 16, 3)).astype("float32")
    assert np.isfinite(model.predict(clouds, verbose=0)).all()
    model.save(tmp_path / "model.keras")


# A model whose inputs are a dict (a backbone's, as CapsuleSequenceClassifier
# takes): `input_shape` a dict of shapes, each input checked by name.
class WeightedSets(kc.models.CapsuleTask):
    def __init__(self, **kwargs):
        super().__init__(
            input_shape={"elements": (None, 3), "weights": (None,)}, num_classes=2, **kwargs
        )
        self.primary = kc.layers.SetPrimaryCapsule(2, 4)
        self.classes = kc.layers.Capsule(2, 4)
        self.lengths = kc.layers.Length()

    def scores_and_poses(self, inputs, training=None):
        self.check_inputs(inputs, "inputs")
        x = inputs["elements"] * keras.ops.expand_dims(inputs["weights"], -1)
        poses = self.classes(self.primary(x))
        return self.lengths(poses), poses

    def default_loss(self):
        return kc.losses.MarginLoss()


def _sets(n=5, **changes):
    inputs = {"elements": ones(2, n, 3), "weights": ones(2, n)}
    inputs.update(changes)
    return {k: v for k, v in inputs.items() if v is not None}


def _named(key, shape, method, sizes):
    argument = ARGUMENT[method]
    return (
        rf"WeightedSets expects '{key}' of shape \(batch, {sizes}\) with n >= 1\. "
        rf"Received: {argument}\['{key}'\]\.shape={re.escape(str(shape))}"
    )


def _keys(method, keys):
    return (
        r"WeightedSets expects inputs: a dict with the keys \['elements', 'weights'\]\. "
        rf"Received: {ARGUMENT[method]}\.keys\(\)={re.escape(str(keys))}"
    )


DICT_CASES = [
    case
    for method in ARGUMENT
    for case in (
        (f"dict-{method}-missing-key", method, _sets(weights=None), _keys(method, ["elements"])),
        (
            f"dict-{method}-not-a-dict",
            method,
            ones(2, 5, 3),
            r"WeightedSets expects inputs: a dict with the keys \['elements', 'weights'\]\. "
            rf"Received: {ARGUMENT[method]}\.shape=\(2, 5, 3\)",
        ),
        (
            f"dict-{method}-last-axis",
            method,
            _sets(elements=ones(2, 5, 4)),
            _named("elements", (2, 5, 4), method, "n, 3"),
        ),
        (
            f"dict-{method}-rank",
            method,
            _sets(weights=ones(2, 5, 1)),
            _named("weights", (2, 5, 1), method, "n"),
        ),
        (
            f"dict-{method}-zero-elements",
            method,
            _sets(n=0),
            _named("elements", (2, 0, 3), method, "n, 3"),
        ),
    )
]


@pytest.fixture(scope="module")
def weighted_sets():
    keras.utils.set_random_seed(0)
    model = WeightedSets()
    model.compile()
    return model


@pytest.mark.parametrize(
    "method, x, pattern", [c[1:] for c in DICT_CASES], ids=[c[0] for c in DICT_CASES]
)
def test_bad_dict_inputs_are_refused_by_name(weighted_sets, method, x, pattern, monkeypatch):
    with monkeypatch.context() as patch:
        _forbid_ops(patch)
        with pytest.raises(ValueError, match=pattern):
            _run(weighted_sets, method, x)


def test_good_dict_inputs_pass(weighted_sets):
    assert weighted_sets.predict(_sets(), verbose=0).shape == (2, 2)


# CapsuleSequenceClassifier (a keras-hub backbone's dict of inputs): a
# direct call with a missing input, one array, or inputs of the wrong rank
# is refused by the backbone's own input check, before any computation.
def _tokens(**changes):
    tokens = np.full((2, 8), 4, "int32")
    inputs = {"token_ids": tokens, "segment_ids": tokens * 0, "padding_mask": tokens > 0}
    inputs.update(changes)
    return {k: v for k, v in inputs.items() if v is not None}


SEQUENCE_CASES = [
    (
        "sequence-missing-input",
        _tokens(segment_ids=None),
        r"expects inputs: a dict with the keys \['padding_mask', 'segment_ids', "
        r"'token_ids'\]\. Received: (inputs|x)\.keys\(\)=\['padding_mask', 'token_ids'\]",
    ),
    (
        "sequence-not-a-dict",
        np.full((2, 8), 4, "int32"),
        r"expects inputs: a dict with the keys .*Received: (inputs|x)\.shape=\(2, 8\)",
    ),
    (
        "sequence-rank-1",
        _tokens(
            token_ids=np.full((2,), 4, "int32"),
            segment_ids=np.zeros((2,), "int32"),
            padding_mask=np.ones((2,), bool),
        ),
        r"expects 'token_ids' of shape \(batch, n\) with n >= 1\. "
        r"Received: (inputs|x)\['token_ids'\]\.shape=\(2,\)",
    ),
    (
        "sequence-rank-3",
        _tokens(token_ids=np.full((2, 8, 1), 4, "int32")),
        r"Received: (inputs|x)\['token_ids'\]\.shape=\(2, 8, 1\)",
    ),
    (
        "sequence-longer-than-the-backbone-takes",
        _tokens(
            token_ids=np.full((2, 64), 4, "int32"),
            segment_ids=np.zeros((2, 64), "int32"),
            padding_mask=np.ones((2, 64), bool),
        ),
        r"takes sequences of at most \d+ tokens \(its max_sequence_length\)\. "
        r"Received: (inputs|x)\['token_ids'\]\.shape=\(2, 64\)",
    ),
    (
        "sequence-no-tokens",
        _tokens(
            token_ids=np.zeros((2, 0), "int32"),
            segment_ids=np.zeros((2, 0), "int32"),
            padding_mask=np.ones((2, 0), bool),
        ),
        r"with n >= 1\. Received: (inputs|x)\['\w+'\]\.shape=\(2, 0\)",
    ),
]


@pytest.mark.one_backend  # checks made before any computation: the same Python on every backend
@pytest.mark.parametrize(
    "x, pattern", [c[1:] for c in SEQUENCE_CASES], ids=[c[0] for c in SEQUENCE_CASES]
)
def test_bad_inputs_to_the_sequence_classifier_are_refused(x, pattern, monkeypatch):
    pytest.importorskip("keras_hub")
    from tests.models.ready_models import _sequence_classifier

    keras.utils.set_random_seed(0)
    model = _sequence_classifier()
    with monkeypatch.context() as patch:
        _forbid_ops(patch)
        with pytest.raises(ValueError, match=pattern):
            model(x)
        with pytest.raises(ValueError, match=pattern):
            model.predict(x, verbose=0)
    # Refused before Keras traced a step: the model still predicts.
    assert model.predict(_tokens(), verbose=0).shape == (2, 2)
