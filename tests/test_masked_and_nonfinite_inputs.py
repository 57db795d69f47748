"""Bad input on the new families gets a defined answer, never a wrong one
for the rest of the batch: a cloud with every point masked gives finite
outputs, a NaN in one sample stays in that sample (no error for the batch),
a NaN at a masked-out position takes no part, and inputs of no elements
give the documented outputs.

Each row: (subject, input builder, what must hold). Sample 1 of a batch of
3 is the bad one; the other samples must give what they give alone. The
layers without masks (the 1-D and 3-D primaries, ConvCapsule3D) have the
NaN rows only."""

import dataclasses

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.models.ready_models import _point_capsnet, _quaternion_classifier, point_classifier
from tests.test_case import BACKEND, forward, gradients, to_numpy

BATCH, POINTS, BAD = 3, 32, 1


# Subjects: `make()` -> `run(subject, x, mask)` gives numpy outputs.
@dataclasses.dataclass
class Subject:
    name: str
    make: object
    run: object
    features: object = 3  # the inputs' last axis, or the shape of a sample
    model: object = None


def _model_run(subject, x, mask):
    kwargs = {} if mask is None else {"mask": mask}
    return to_numpy(forward(subject, x, **kwargs))


def _encode_run(subject, x, mask):
    # `return_poses=True`: the latent capsules, as `encode` gives them
    # (the reconstruction draws its grid at every call).
    kwargs = {} if mask is None else {"mask": mask}
    return to_numpy(forward(subject, x, return_poses=True, **kwargs)[1])


def _layer_run(subject, x, mask):
    return to_numpy(subject(x) if mask is None else subject(x, mask=mask))


SUBJECTS = {
    "PointCapsNet.encode": Subject("PointCapsNet.encode", _point_capsnet, _encode_run),
    "PointCapsuleClassifier[capsules]": Subject(
        "PointCapsuleClassifier[capsules]", point_classifier("capsules"), _model_run
    ),
    "PointCapsuleClassifier[linear]": Subject(
        "PointCapsuleClassifier[linear]", point_classifier("linear"), _model_run
    ),
    "PointPrimaryCapsule": Subject(
        "PointPrimaryCapsule", lambda: kc.layers.PointPrimaryCapsule(4, 3), _layer_run, 5
    ),
    "LocalReferenceFrames": Subject(
        "LocalReferenceFrames", lambda: kc.layers.LocalReferenceFrames(8), _layer_run
    ),
    "QuaternionCapsuleClassifier": Subject(
        "QuaternionCapsuleClassifier", _quaternion_classifier, _model_run
    ),
    "VectorRouting": Subject("VectorRouting", lambda: kc.layers.VectorRouting(3, 4), _layer_run, 6),
    "SetPrimaryCapsule": Subject(
        "SetPrimaryCapsule", lambda: kc.layers.SetPrimaryCapsule(2, 4), _layer_run, 6
    ),
    "PrimaryCapsule1D": Subject(
        "PrimaryCapsule1D", lambda: kc.layers.PrimaryCapsule1D(2, 4, 3), _layer_run, 5
    ),
    "PrimaryCapsule3D": Subject(
        "PrimaryCapsule3D",
        lambda: kc.layers.PrimaryCapsule3D(2, 4, 2, grid=True),
        _layer_run,
        (4, 4, 4, 2),
    ),
    "ConvCapsule3D": Subject(
        "ConvCapsule3D",
        lambda: kc.layers.ConvCapsule3D(2, 4, 2, router=kc.DynamicRouting(iterations=2)),
        _layer_run,
        (3, 3, 3, 2, 4),
    ),
}


def _clean(features):
    shape = (POINTS, features) if isinstance(features, int) else features
    x = np.random.default_rng(0).normal(size=(BATCH, *shape)).astype("float32")
    mask = np.ones((BATCH, POINTS), bool)
    mask[2, -6:] = False  # a padded cloud beside the bad one
    return x, mask


# Input builders: features -> (x, mask, clean x or None).
def fully_masked(features):
    x, mask = _clean(features)
    mask[BAD] = False
    return x, mask, None


def nan_in_one_sample(features):
    x, _ = _clean(features)
    x[(BAD, *np.unravel_index(15, x.shape[1:]))] = np.nan  # point 5, coordinate 0
    return x, None, None


def nan_masked_out(features):
    clean, mask = _clean(features)
    mask[BAD, -8:] = False
    x = clean.copy()
    x[BAD, -3] = np.nan
    x[BAD, -5, 1] = np.inf
    return x, mask, clean


def _alone(subject, x, mask, i):
    return subject.run(subject.model, x[i : i + 1], None if mask is None else mask[i : i + 1])[0]


def _others_as_alone(subject, x, mask, outputs):
    for i in range(BATCH):
        if i != BAD:
            np.testing.assert_allclose(
                outputs[i], _alone(subject, x, mask, i), rtol=1e-5, atol=1e-6, err_msg=f"cloud {i}"
            )


# What must hold: (subject, x, mask, clean, outputs) -> None.
def finite_and_rest_alone(subject, x, mask, clean, outputs):
    assert np.isfinite(outputs).all(), outputs
    _others_as_alone(subject, x, mask, outputs)


def rest_alone(subject, x, mask, clean, outputs):
    # The bad sample's outputs are NaN or whatever they are; the others' exact.
    _others_as_alone(subject, x, mask, outputs)


def as_clean(subject, x, mask, clean, outputs):
    assert np.isfinite(outputs[[i for i in range(BATCH) if i != BAD]]).all()
    np.testing.assert_allclose(
        outputs, subject.run(subject.model, clean, mask), rtol=1e-6, atol=1e-7
    )


def frames_nan_in_bad_sample(subject, x, mask, clean, outputs):
    assert np.isnan(outputs[BAD]).all(), outputs[BAD]
    rest_alone(subject, x, mask, clean, outputs)


def nan_in_bad_sample(subject, x, mask, clean, outputs):
    # The NaN shows in its own sample's outputs (not a silent 0) on every backend.
    assert np.isnan(outputs[BAD]).any(), outputs[BAD]
    rest_alone(subject, x, mask, clean, outputs)


ROWS = [
    ("PointCapsNet.encode", fully_masked, finite_and_rest_alone),
    ("PointCapsNet.encode", nan_in_one_sample, rest_alone),
    ("PointCapsNet.encode", nan_masked_out, as_clean),
    ("PointCapsuleClassifier[capsules]", fully_masked, finite_and_rest_alone),
    ("PointCapsuleClassifier[capsules]", nan_in_one_sample, rest_alone),
    ("PointCapsuleClassifier[capsules]", nan_masked_out, as_clean),
    ("PointCapsuleClassifier[linear]", fully_masked, finite_and_rest_alone),
    ("PointCapsuleClassifier[linear]", nan_in_one_sample, rest_alone),
    ("PointCapsuleClassifier[linear]", nan_masked_out, as_clean),
    ("PointPrimaryCapsule", fully_masked, finite_and_rest_alone),
    ("PointPrimaryCapsule", nan_masked_out, as_clean),
    ("LocalReferenceFrames", nan_in_one_sample, frames_nan_in_bad_sample),
    ("LocalReferenceFrames", fully_masked, finite_and_rest_alone),
    ("QuaternionCapsuleClassifier", nan_in_one_sample, nan_in_bad_sample),
    ("QuaternionCapsuleClassifier", nan_masked_out, as_clean),
    ("QuaternionCapsuleClassifier", fully_masked, finite_and_rest_alone),
    ("VectorRouting", fully_masked, finite_and_rest_alone),
    ("VectorRouting", nan_masked_out, as_clean),
    ("SetPrimaryCapsule", fully_masked, finite_and_rest_alone),
    ("SetPrimaryCapsule", nan_masked_out, as_clean),
    ("VectorRouting", nan_in_one_sample, rest_alone),
    ("SetPrimaryCapsule", nan_in_one_sample, rest_alone),
    ("PointPrimaryCapsule", nan_in_one_sample, rest_alone),
    ("PrimaryCapsule1D", nan_in_one_sample, rest_alone),
    ("PrimaryCapsule3D", nan_in_one_sample, rest_alone),
    ("ConvCapsule3D", nan_in_one_sample, rest_alone),
]


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get(name):
        if name not in cache:
            keras.utils.set_random_seed(0)
            subject = SUBJECTS[name]
            cache[name] = dataclasses.replace(subject, model=subject.make())
        return cache[name]

    return get


@pytest.mark.parametrize(
    "name, inputs, check",
    ROWS,
    ids=[f"{name}-{inputs.__name__}" for name, inputs, _ in ROWS],
)
def test_row(built, name, inputs, check):
    subject = built(name)
    x, mask, clean = inputs(subject.features)
    outputs = subject.run(subject.model, x, mask)  # no exception for the batch
    check(subject, x, mask, clean, outputs)


def test_fully_masked_cloud_gradients_are_finite():
    # The scores' gradient w.r.t. the points, with one cloud fully masked.
    keras.utils.set_random_seed(0)
    model = point_classifier("capsules")()
    x, mask, _ = fully_masked(3)
    mask_tensor = keras.ops.convert_to_tensor(mask)

    def loss(tensors):
        return keras.ops.sum(model(tensors["points"], mask=mask_tensor))

    grads = gradients(loss, {"points": keras.ops.convert_to_tensor(x)}, ["points"])
    grad = to_numpy(grads["points"])
    assert np.isfinite(grad).all()
    assert not grad[BAD].any()  # the dropped points take no part
    assert grad[0].any()


def test_fully_masked_primary_capsules_weight_gradients_are_finite():
    # Training mode (masked batch statistics): the gradients w.r.t. the
    # features, with one cloud fully masked.
    keras.utils.set_random_seed(0)
    layer = kc.layers.PointPrimaryCapsule(4, 3)
    x, mask, _ = fully_masked(5)
    mask_tensor = keras.ops.convert_to_tensor(mask)
    layer.build(x.shape)
    kernel = layer.dense.kernel

    if BACKEND == "jax":
        trainable = [v.value for v in layer.trainable_variables]
        fixed = [v.value for v in layer.non_trainable_variables]
        index = [v.path for v in layer.trainable_variables].index(kernel.path)

        def loss(tensors):
            weights = list(trainable)
            weights[index] = tensors["kernel"]
            out, _ = layer.stateless_call(
                weights, fixed, tensors["x"], mask=mask_tensor, training=True
            )
            return keras.ops.sum(keras.ops.square(out))

        tensors = {"x": keras.ops.convert_to_tensor(x), "kernel": kernel.value}
        grads = gradients(loss, tensors, ["x", "kernel"])
        grads = [to_numpy(grads["x"]), to_numpy(grads["kernel"])]
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        inputs = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            loss = tf.reduce_sum(tf.square(layer(inputs, mask=mask_tensor, training=True)))
        grads = [to_numpy(g) for g in tape.gradient(loss, [inputs, kernel.value])]
    else:
        import torch

        inputs = torch.tensor(x, requires_grad=True)
        loss = torch.sum(layer(inputs, mask=mask_tensor, training=True) ** 2)
        grads = [to_numpy(g) for g in torch.autograd.grad(loss, [inputs, kernel.value])]
    for grad in grads:
        assert np.isfinite(grad).all()
    assert not grads[0][BAD].any()


# Inputs of no elements where that is defined (the layers refuse zero
# features, channels, capsule types: tests/test_bad_inputs_new_families.py):
# VectorRouting routes nothing to zeros, as a fully masked sequence;
# SetPrimaryCapsule makes no capsules of an empty set.
def test_vector_routing_of_no_inputs_gives_zeros():
    layer = kc.layers.VectorRouting(3, 4)
    empty = np.ones((2, 0, 6), "float32")
    for kwargs in ({}, {"mask": np.ones((2, 0), bool)}):
        outputs = to_numpy(layer(empty, **kwargs))
        assert outputs.shape == (2, 3, 4)
        np.testing.assert_array_equal(outputs, 0.0)
    masked = to_numpy(layer(np.ones((2, 5, 6), "float32"), mask=np.zeros((2, 5), bool)))
    np.testing.assert_array_equal(masked, 0.0)


def test_set_primary_capsules_of_empty_sets_are_none():
    layer = kc.layers.SetPrimaryCapsule(2, 4)
    capsules = layer(np.ones((3, 0, 6), "float32"))
    assert tuple(capsules.shape) == (3, 0, 4)
    mask = layer.compute_mask(None, keras.ops.ones((3, 0), "bool"))
    assert tuple(mask.shape) == (3, 0)


def test_sequence_classifier_with_a_fully_masked_sequence():
    # The padding mask drops every token of sequence 1: finite scores, and
    # the other sequences score as alone.
    pytest.importorskip("keras_hub")
    from tests.models.ready_models import _sequence_classifier

    keras.utils.set_random_seed(0)
    model = _sequence_classifier()
    tokens = np.random.default_rng(0).integers(3, 10, size=(BATCH, 8)).astype("int32")
    mask = np.ones_like(tokens, bool)
    mask[BAD] = False
    mask[2, -3:] = False
    x = {"token_ids": tokens, "segment_ids": np.zeros_like(tokens), "padding_mask": mask}
    scores = to_numpy(model(x))
    assert np.isfinite(scores).all(), scores
    for i in (0, 2):
        alone = to_numpy(model({k: v[i : i + 1] for k, v in x.items()}))[0]
        np.testing.assert_allclose(scores[i], alone, rtol=1e-5, atol=1e-6, err_msg=f"sequence {i}")
