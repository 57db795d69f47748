"""Wrong constructions and calls of every public class, and what must be
accepted: NumPy numbers, and the sizes a built layer's weights do not fix.

Each case must raise a ValueError or TypeError whose message names the
argument and the value received, before any computation: while a case runs
every `keras.ops` function raises, so an error that comes from a backend
op (or a check that runs after one) fails the test.
"""

import json

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.callbacks import SpreadLossMarginScheduler

NAN, INF = float("nan"), float("inf")


def ones(*shape):
    return np.ones(shape, "float32")


def construct(cls, *args, **kwargs):
    """A case: construct `cls(*args, **kwargs)`."""
    return lambda: lambda: cls(*args, **kwargs)


def call(make, *inputs):
    """A case: `make()(*inputs)`, the layer made before the check."""

    def setup():
        layer = make()
        return lambda: layer(*inputs)

    return setup


def call_built(make_layer, first_inputs, *inputs):
    """A case: a layer called once with `first_inputs` (computes), then
    with `inputs`, which must be refused."""

    def setup():
        layer = make_layer()
        layer(*first_inputs)
        return lambda: layer(*inputs)

    return setup


def shared_router(router_cls, first, second):
    """A case: one router given to two Capsule layers, `first` and
    `second` = (num_capsules, capsule_dim, in_caps)."""

    def setup():
        router = router_cls()
        n, d, i = first
        kc.Capsule(n, d, router=router)(ones(2, i, 4))
        n, d, i = second
        return lambda: kc.Capsule(n, d, router=router)(ones(2, i, 4))

    return setup


VOTES = ones(2, 6, 3, 4)
POSES = ones(2, 10, 4)

# (case id, setup -> thunk, substrings the message must contain)
CASES = [
    # Routers: integers, floats and choices (items 9, 10).
    ("dynamic-iterations-0", construct(kc.DynamicRouting, iterations=0), ["iterations=0"]),
    ("dynamic-iterations-float", construct(kc.DynamicRouting, iterations=2.5), ["iterations=2.5"]),
    ("dynamic-iterations-str", construct(kc.DynamicRouting, iterations="3"), ["iterations='3'"]),
    ("dynamic-iterations-bool", construct(kc.DynamicRouting, iterations=True), ["iterations=True"]),
    ("dynamic-iterations-None", construct(kc.DynamicRouting, iterations=None), ["iterations=None"]),
    ("dynamic-temperature-0", construct(kc.DynamicRouting, temperature=0), ["temperature=0"]),
    ("dynamic-temperature-nan", construct(kc.DynamicRouting, temperature=NAN), ["temperature=nan"]),
    ("dynamic-temperature-inf", construct(kc.DynamicRouting, temperature=INF), ["temperature=inf"]),
    ("dynamic-step-nan", construct(kc.DynamicRouting, step_size=NAN), ["step_size=nan"]),
    ("dynamic-step-str", construct(kc.DynamicRouting, step_size="foo"), ["step_size='foo'"]),
    ("dynamic-step-negative", construct(kc.DynamicRouting, step_size=-1.0), ["step_size=-1.0"]),
    ("dynamic-step-inf", construct(kc.DynamicRouting, step_size=-INF), ["step_size=-inf"]),
    ("dynamic-agreement", construct(kc.DynamicRouting, agreement="l2"), ["agreement='l2'"]),
    ("em-iterations-0", construct(kc.EMRouting, iterations=0), ["iterations=0"]),
    ("em-final-lambda-neg", construct(kc.EMRouting, final_lambda=-1.0), ["final_lambda=-1.0"]),
    ("em-final-lambda-nan", construct(kc.EMRouting, final_lambda=NAN), ["final_lambda=nan"]),
    ("em-epsilon-0", construct(kc.EMRouting, epsilon=0.0), ["epsilon=0.0"]),
    ("em-epsilon-inf", construct(kc.EMRouting, epsilon=INF), ["epsilon=inf"]),
    ("em-inv-temp-0", construct(kc.EMRouting, inverse_temperature=0), ["inverse_temperature=0"]),
    (
        "em-inv-temp-nan",
        construct(kc.EMRouting, inverse_temperature=NAN),
        ["inverse_temperature=nan"],
    ),
    (
        "em-inv-temp-length",
        construct(kc.EMRouting, inverse_temperature=[1.0, 2.0]),
        ["inverse_temperature=[1.0, 2.0]"],
    ),
    (
        "inverted-iterations",
        construct(kc.InvertedDotProductRouting, iterations=0),
        ["iterations=0"],
    ),
    (
        "inverted-temperature",
        construct(kc.InvertedDotProductRouting, temperature=-1),
        ["temperature=-1"],
    ),
    (
        "self-attention-temperature",
        construct(kc.SelfAttentionRouting, temperature=NAN),
        ["temperature=nan"],
    ),
    ("sparse-top-k-0", construct(kc.SparseAttentionRouting, top_k=0), ["top_k=0"]),
    ("sparse-top-k-float", construct(kc.SparseAttentionRouting, top_k=1.5), ["top_k=1.5"]),
    ("sparse-top-k-str", construct(kc.SparseAttentionRouting, top_k="2"), ["top_k='2'"]),
    (
        "sparse-temperature-inf",
        construct(kc.SparseAttentionRouting, temperature=INF),
        ["temperature=inf"],
    ),
    # Layers: sizes, int tuples (item 7) and choices.
    ("capsule-num-0", construct(kc.Capsule, 0, 8), ["num_capsules=0"]),
    ("capsule-num-float", construct(kc.Capsule, 3.0, 8), ["num_capsules=3.0"]),
    ("capsule-dim-str", construct(kc.Capsule, 3, "8"), ["capsule_dim='8'"]),
    ("capsule-dim-np-float", construct(kc.Capsule, 3, np.float64(8)), ["capsule_dim=", "8.0"]),
    ("capsule-router-str", construct(kc.Capsule, 3, 8, router="dynamo"), ["router='dynamo'"]),
    ("primary-kernel-float", construct(kc.PrimaryCapsule, 4, 8, 3.0), ["kernel_size=3.0"]),
    ("primary-kernel-None", construct(kc.PrimaryCapsule, 4, 8, None), ["kernel_size=None"]),
    ("primary-kernel-str", construct(kc.PrimaryCapsule, 4, 8, "3"), ["kernel_size='3'"]),
    ("primary-kernel-1-tuple", construct(kc.PrimaryCapsule, 4, 8, (3,)), ["kernel_size=(3,)"]),
    ("primary-strides-float", construct(kc.PrimaryCapsule, 4, 8, 3, strides=2.0), ["strides=2.0"]),
    (
        "primary-strides-bool",
        construct(kc.PrimaryCapsule, 4, 8, 3, strides=(True, 1)),
        ["strides=(True, 1)"],
    ),
    ("primary-padding", construct(kc.PrimaryCapsule, 4, 8, 3, padding="full"), ["padding='full'"]),
    (
        "primary-implementation",
        construct(kc.PrimaryCapsule, 4, 8, 3, implementation="fft"),
        ["implementation='fft'"],
    ),
    (
        "conv2d-kernel-3-tuple",
        construct(kc.ConvCapsule2D, 2, 4, (3, 3, 3)),
        ["kernel_size=(3, 3, 3)"],
    ),
    ("conv2d-strides-0", construct(kc.ConvCapsule2D, 2, 4, 3, strides=0), ["strides=0"]),
    (
        "conv2d-padding",
        construct(kc.ConvCapsule2D, 2, 4, 3, padding="causal"),
        ["padding='causal'"],
    ),
    ("conv2d-dim-0", construct(kc.ConvCapsule2D, 2, 0), ["capsule_dim=0"]),
    ("conv1d-kernel-pair", construct(kc.ConvCapsule1D, 2, 4, (3, 3)), ["kernel_size=(3, 3)"]),
    ("primary-matrix-strides", construct(kc.PrimaryMatrixCapsule, 2, strides=1.5), ["strides=1.5"]),
    ("conv-matrix-kernel-0", construct(kc.ConvMatrixCapsule, 2, 0), ["kernel_size=0"]),
    ("conv-matrix-router", construct(kc.ConvMatrixCapsule, 2, router=5), ["router=5"]),
    ("class-matrix-num-float", construct(kc.ClassMatrixCapsule, 2.0), ["num_capsules=2.0"]),
    ("attention-heads-0", construct(kc.CapsuleAttention, num_heads=0), ["num_heads=0"]),
    ("attention-top-k-0", construct(kc.CapsuleAttention, top_k=0), ["top_k=0"]),
    (
        "attention-window-float",
        construct(kc.CapsuleAttention, window_size=2.5),
        ["window_size=2.5"],
    ),
    ("pruning-threshold-high", construct(kc.CapsulePruning, 1.5), ["threshold=1.5"]),
    ("pruning-threshold-nan", construct(kc.CapsulePruning, NAN), ["threshold=nan"]),
    ("pruning-threshold-str", construct(kc.CapsulePruning, "0.9"), ["threshold='0.9'"]),
    ("length-epsilon-0", construct(kc.Length, epsilon=0), ["epsilon=0"]),
    ("length-epsilon-neg", construct(kc.Length, epsilon=-1), ["epsilon=-1"]),
    ("length-epsilon-nan", construct(kc.Length, epsilon=NAN), ["epsilon=nan"]),
    ("length-epsilon-str", construct(kc.Length, epsilon="1e-7"), ["epsilon='1e-7'"]),
    (
        "auto-conv-implementation",
        construct(kc.AutoConv2D, 4, 3, implementation="fft"),
        ["implementation='fft'"],
    ),
    # Losses and the margin scheduler.
    ("margin-m-plus-neg", construct(kc.MarginLoss, m_plus=-0.5), ["m_plus=-0.5"]),
    ("margin-m-plus-high", construct(kc.MarginLoss, m_plus=1.5), ["m_plus=1.5"]),
    ("margin-m-plus-str", construct(kc.MarginLoss, m_plus="high"), ["m_plus='high'"]),
    (
        "margin-m-minus-above",
        construct(kc.MarginLoss, m_plus=0.1, m_minus=0.9),
        ["m_plus=0.1", "m_minus=0.9"],
    ),
    ("margin-m-minus-neg", construct(kc.MarginLoss, m_minus=-0.1), ["m_minus=-0.1"]),
    ("margin-down-weight-neg", construct(kc.MarginLoss, down_weight=-1), ["down_weight=-1"]),
    ("margin-down-weight-nan", construct(kc.MarginLoss, down_weight=NAN), ["down_weight=nan"]),
    (
        "margin-reduction",
        construct(kc.MarginLoss, class_reduction="max"),
        ["class_reduction='max'"],
    ),
    ("spread-margin-0", construct(kc.SpreadLoss, margin=0), ["margin=0"]),
    ("spread-margin-nan", construct(kc.SpreadLoss, margin=NAN), ["margin=nan"]),
    ("spread-margin-str", construct(kc.SpreadLoss, margin="0.2"), ["margin='0.2'"]),
    ("scheduler-loss", lambda: lambda: SpreadLossMarginScheduler(kc.MarginLoss()), ["loss=<"]),
    (
        "scheduler-steps-0",
        lambda: lambda: SpreadLossMarginScheduler(kc.SpreadLoss(), steps=0),
        ["steps=0"],
    ),
    (
        "scheduler-start-nan",
        lambda: lambda: SpreadLossMarginScheduler(kc.SpreadLoss(), start=NAN),
        ["start=nan"],
    ),
    (
        "scheduler-end-str",
        lambda: lambda: SpreadLossMarginScheduler(kc.SpreadLoss(), end="0.9"),
        ["end='0.9'"],
    ),
    # The ready models check their arguments first.
    ("capsnet-classes-0", construct(kc.CapsNet, num_classes=0), ["num_classes=0"]),
    ("capsnet-shape-2d", construct(kc.CapsNet, input_shape=(28, 28)), ["input_shape=(28, 28)"]),
    (
        "efficient-classes-float",
        construct(kc.EfficientCapsNet, num_classes=2.5),
        ["num_classes=2.5"],
    ),
    ("matrix-net-margin", construct(kc.MatrixCapsNet, margin=NAN), ["margin=nan"]),
    (
        "matrix-net-conv-filters-float",
        construct(kc.MatrixCapsNet, conv_filters=4.0),
        ["conv_filters=4.0"],
    ),
    # Calls: child activations against the votes (item 4).
    (
        "em-activations-width",
        call(kc.EMRouting, VOTES, ones(2, 5)),
        ["activations.shape=(2, 5)", "(2, 6, 3, 4)"],
    ),
    (
        "em-activations-rank",
        call(kc.EMRouting, VOTES, ones(2, 6, 1)),
        ["activations.shape=(2, 6, 1)"],
    ),
    (
        "self-routing-activations",
        call(kc.SelfRouting, VOTES, ones(2, 5)),
        ["activations.shape=(2, 5)"],
    ),
    (
        "dynamic-activations-batch",
        call(kc.DynamicRouting, VOTES, ones(3, 6)),
        ["activations.shape=(3, 6)"],
    ),
    ("router-votes-rank", call(kc.DynamicRouting, ones(2, 6, 4)), ["votes.shape=(2, 6, 4)"]),
    (
        "capsule-em-activations",
        call(lambda: kc.Capsule(3, 8, router=kc.EMRouting()), [ones(2, 6, 4), ones(2, 5)]),
        ["activations.shape=(2, 5)"],
    ),
    ("capsule-poses-rank", call(lambda: kc.Capsule(3, 8), ones(2, 6)), ["poses.shape=(2, 6)"]),
    (
        "primary-no-channels",
        call(lambda: kc.PrimaryCapsule(2, 4, 3), ones(2, 8, 8, 0)),
        ["PrimaryCapsule needs at least one channel", "inputs.shape=(2, 8, 8, 0)"],
    ),
    (
        "conv2d-no-types",
        call(lambda: kc.ConvCapsule2D(2, 4, 3), ones(2, 6, 6, 0, 4)),
        ["ConvCapsule2D needs at least one capsule type", "poses.shape=(2, 6, 6, 0, 4)"],
    ),
    (
        "conv1d-no-pose-dimension",
        call(lambda: kc.ConvCapsule1D(2, 4, 3), ones(2, 6, 3, 0)),
        ["ConvCapsule1D needs at least one pose dimension", "poses.shape=(2, 6, 3, 0)"],
    ),
    (
        "capsule-no-children",
        call(lambda: kc.Capsule(3, 8), ones(2, 0, 4)),
        ["at least one child capsule", "poses.shape=(2, 0, 4)"],
    ),
    (
        "capsule-no-pose-dimension",
        call(lambda: kc.Capsule(3, 8), ones(2, 6, 0)),
        ["at least one pose dimension", "poses.shape=(2, 6, 0)"],
    ),
    (
        "capsule-built-activations",
        call_built(
            lambda: kc.Capsule(3, 4, router=kc.EMRouting()),
            [[ones(2, 6, 4), ones(2, 6)]],
            [ones(2, 6, 4), ones(2, 4)],
        ),
        ["Input 1", "axis -1", "value 6", "(2, 4)"],
    ),
    (
        "conv2d-activations",
        call(lambda: kc.ConvCapsule2D(2, 4, 3), [ones(1, 5, 5, 2, 4), ones(1, 5, 5, 3)]),
        ["activations.shape=(1, 5, 5, 3)"],
    ),
    (
        "class-matrix-activations",
        call(lambda: kc.ClassMatrixCapsule(3), [ones(1, 2, 2, 3, 16), ones(1, 2, 2, 4)]),
        ["activations.shape=(1, 2, 2, 4)"],
    ),
    (
        "conv-matrix-pose-size",
        call(lambda: kc.ConvMatrixCapsule(2, 1), [ones(1, 2, 2, 3, 9), ones(1, 2, 2, 3)]),
        ["poses.shape=(1, 2, 2, 3, 9)"],
    ),
    # Mask labels (items 3 and 5).
    ("mask-one-hot-width", call(kc.Mask, [POSES, ones(2, 5)]), ["labels.shape=(2, 5)"]),
    (
        "mask-ids-2-columns",
        call(kc.Mask, [POSES, np.zeros((2, 2), "int32")]),
        ["labels.shape=(2, 2)"],
    ),
    ("mask-labels-rank-3", call(kc.Mask, [POSES, ones(2, 10, 1)]), ["labels.shape=(2, 10, 1)"]),
    ("mask-labels-batch", call(kc.Mask, [POSES, np.zeros((3,), "int32")]), ["labels.shape=(3,)"]),
    (
        "mask-built-labels",
        call_built(kc.Mask, [[POSES, ones(2, 10)]], [POSES, ones(2, 4)]),
        ["labels.shape=(2, 4)"],
    ),
    ("mask-poses-rank", call(kc.Mask, ones(2, 10)), ["poses.shape=(2, 10)"]),
    # A built router called with other sizes, or shared (item 6).
    (
        "self-attention-built-in-caps",
        call_built(kc.SelfAttentionRouting, [VOTES], ones(2, 5, 3, 4)),
        ["in_caps=6", "votes.shape=(2, 5, 3, 4)"],
    ),
    (
        "self-routing-built-dim",
        call_built(kc.SelfRouting, [VOTES], ones(2, 6, 3, 8)),
        ["dim=4", "votes.shape=(2, 6, 3, 8)"],
    ),
    (
        "em-built-out-caps",
        call_built(kc.EMRouting, [VOTES], ones(2, 6, 5, 4)),
        ["out_caps=3", "votes.shape=(2, 6, 5, 4)"],
    ),
    (
        "self-attention-shared",
        shared_router(kc.SelfAttentionRouting, (3, 4, 6), (3, 4, 5)),
        ["in_caps=6", "votes.shape=(2, 5, 3, 4)"],
    ),
    (
        "em-shared",
        shared_router(kc.EMRouting, (3, 4, 6), (4, 4, 6)),
        ["out_caps=3", "votes.shape=(2, 6, 4, 4)"],
    ),
    (
        "inverted-shared",
        shared_router(kc.InvertedDotProductRouting, (3, 4, 6), (3, 8, 6)),
        ["dim=4", "votes.shape=(2, 6, 3, 8)"],
    ),
    (
        "sparse-top-k-out-caps",
        call(lambda: kc.SparseAttentionRouting(top_k=4), VOTES),
        ["top_k=4", "votes.shape=(2, 6, 3, 4)"],
    ),
    (
        "sparse-shared-top-k",
        shared_router(lambda: kc.SparseAttentionRouting(top_k=3), (3, 4, 6), (2, 4, 6)),
        ["top_k=3", "votes.shape=(2, 6, 2, 4)"],
    ),
    # Other call-time shapes.
    (
        "attention-heads-divide",
        call(lambda: kc.CapsuleAttention(num_heads=3), ones(2, 6, 8)),
        ["num_heads=3"],
    ),
    ("attention-top-k-n", call(lambda: kc.CapsuleAttention(top_k=7), ones(2, 6, 8)), ["top_k=7"]),
    (
        "primary-kernel-grid",
        call(lambda: kc.PrimaryCapsule(2, 4, 11), ones(1, 9, 9, 3)),
        ["kernel_size=(11, 11)"],
    ),
    ("length-rank", call(kc.Length, ones(4)), ["input_shape=(4,)"]),
    # A built layer of the 2-D family refuses, before computing, inputs of
    # other sizes or rank than those it was built for (a Keras InputSpec set
    # in `build`): the layer, the axis, the size expected, the shape received.
    *(
        (f"{case_id}-built-{kind}", call_built(make, [first], bad), parts)
        for case_id, make, first, rows in [
            (
                "capsule",
                lambda: kc.Capsule(3, 4),
                ones(2, 6, 8),
                [
                    ("dim", ones(2, 6, 5), ["axis -1", "value 8", "(2, 6, 5)"]),
                    ("in-caps", ones(2, 7, 8), ["axis -2", "value 6", "(2, 7, 8)"]),
                    ("rank", ones(2, 6), ["expected ndim=3", "(2, 6)"]),
                ],
            ),
            (
                "capsule-shared",
                lambda: kc.Capsule(3, 4, share_weights=True),
                ones(2, 6, 8),
                [
                    ("dim", ones(2, 9, 5), ["axis -1", "value 8", "(2, 9, 5)"]),
                    ("rank", ones(2, 6, 8, 1), ["expected ndim=3", "(2, 6, 8, 1)"]),
                ],
            ),
            (
                "primary",
                lambda: kc.PrimaryCapsule(2, 4, 3),
                ones(1, 5, 5, 3),
                [
                    ("channels", ones(1, 5, 5, 2), ["axis -1", "value 3", "(1, 5, 5, 2)"]),
                    ("rank", ones(1, 5, 5), ["expected ndim=4", "(1, 5, 5)"]),
                ],
            ),
            (
                "depthwise-primary",
                lambda: kc.DepthwisePrimaryCapsule(2, 2),
                ones(1, 3, 3, 4),
                [
                    ("channels", ones(1, 3, 3, 5), ["axis -1", "value 4", "(1, 3, 3, 5)"]),
                    ("grid", ones(1, 4, 3, 4), ["axis 1", "value 3", "(1, 4, 3, 4)"]),
                    ("rank", ones(1, 3, 12), ["expected ndim=4", "(1, 3, 12)"]),
                ],
            ),
            (
                "primary-matrix",
                lambda: kc.PrimaryMatrixCapsule(2),
                ones(1, 3, 3, 4),
                [
                    ("channels", ones(1, 3, 3, 5), ["axis -1", "value 4", "(1, 3, 3, 5)"]),
                    ("rank", ones(1, 3, 3), ["expected ndim=4", "(1, 3, 3)"]),
                ],
            ),
            (
                "conv1d",
                lambda: kc.ConvCapsule1D(2, 4, 3),
                ones(1, 6, 2, 4),
                [
                    ("dim", ones(1, 6, 2, 5), ["axis -1", "value 4", "(1, 6, 2, 5)"]),
                    ("rank", ones(1, 6, 2, 4, 1), ["expected ndim=4", "(1, 6, 2, 4, 1)"]),
                ],
            ),
            (
                "conv2d",
                lambda: kc.ConvCapsule2D(2, 4, 3),
                ones(1, 5, 5, 2, 4),
                [
                    ("dim", ones(1, 5, 5, 2, 5), ["axis -1", "value 4", "(1, 5, 5, 2, 5)"]),
                    ("types", ones(1, 5, 5, 3, 4), ["axis -2", "value 2", "(1, 5, 5, 3, 4)"]),
                    ("rank", ones(1, 5, 5, 8), ["expected ndim=5", "(1, 5, 5, 8)"]),
                ],
            ),
            (
                "conv-matrix",
                lambda: kc.ConvMatrixCapsule(2, 1),
                [ones(1, 3, 3, 2, 16), ones(1, 3, 3, 2)],
                [
                    (
                        "types",
                        [ones(1, 3, 3, 3, 16), ones(1, 3, 3, 3)],
                        ["axis -2", "value 2", "(1, 3, 3, 3, 16)"],
                    ),
                    (
                        "rank",
                        [ones(1, 3, 3, 32), ones(1, 3, 3, 2)],
                        ["expected ndim=5", "(1, 3, 3, 32)"],
                    ),
                ],
            ),
            (
                "class-matrix",
                lambda: kc.ClassMatrixCapsule(3),
                [ones(1, 2, 2, 3, 16), ones(1, 2, 2, 3)],
                [
                    (
                        "types",
                        [ones(1, 2, 2, 4, 16), ones(1, 2, 2, 4)],
                        ["axis -2", "value 3", "(1, 2, 2, 4, 16)"],
                    ),
                    (
                        "activations",
                        [ones(1, 2, 2, 3, 16), ones(1, 2, 2, 4)],
                        ["Input 1", "axis -1", "value 3", "(1, 2, 2, 4)"],
                    ),
                    (
                        "rank",
                        [ones(1, 2, 2, 48), ones(1, 2, 2, 3)],
                        ["expected ndim=5", "(1, 2, 2, 48)"],
                    ),
                ],
            ),
            (
                "local",
                lambda: kc.LocalCapsule2D(2, 4, 3),
                ones(1, 5, 5, 2, 3),
                [
                    ("dim", ones(1, 5, 5, 2, 4), ["axis -1", "value 3", "(1, 5, 5, 2, 4)"]),
                    ("types", ones(1, 5, 5, 1, 3), ["axis -2", "value 2", "(1, 5, 5, 1, 3)"]),
                    ("rank", ones(1, 5, 5, 6), ["expected ndim=5", "(1, 5, 5, 6)"]),
                ],
            ),
            (
                "local-deconv",
                lambda: kc.LocalDeconvCapsule2D(2, 4),
                ones(1, 3, 3, 2, 3),
                [
                    ("dim", ones(1, 3, 3, 2, 4), ["axis -1", "value 3", "(1, 3, 3, 2, 4)"]),
                    ("rank", ones(1, 3, 3, 6), ["expected ndim=5", "(1, 3, 3, 6)"]),
                ],
            ),
            (
                "attention",
                lambda: kc.CapsuleAttention(num_heads=2),
                ones(2, 6, 8),
                [
                    ("dim", ones(2, 6, 4), ["axis -1", "value 8", "(2, 6, 4)"]),
                    ("rank", ones(2, 48), ["expected ndim=3", "(2, 48)"]),
                ],
            ),
            (
                "heinsen",
                lambda: kc.HeinsenCapsule(3, 4),
                [ones(2, 6, 4, 4), ones(2, 6)],
                [
                    (
                        "d-inp",
                        [ones(2, 6, 4, 5), ones(2, 6)],
                        ["axis -1", "value 4", "(2, 6, 4, 5)"],
                    ),
                    (
                        "in-caps",
                        [ones(2, 7, 4, 4), ones(2, 7)],
                        ["axis -3", "value 6", "(2, 7, 4, 4)"],
                    ),
                    ("rank", [ones(2, 6, 16), ones(2, 6)], ["expected ndim=4", "(2, 6, 16)"]),
                ],
            ),
            (
                "length",
                kc.Length,
                ones(2, 3, 4),
                [("rank", ones(4), ["expected min_ndim=2", "(4,)"])],
            ),
            (
                "squash",
                kc.Squash,
                ones(2, 3, 4),
                [("rank", ones(4), ["expected min_ndim=2", "(4,)"])],
            ),
            (
                "pruning",
                kc.CapsulePruning,
                ones(2, 3, 4),
                [("rank", ones(2, 12), ["expected ndim=3", "(2, 12)"])],
            ),
            (
                "mask",
                kc.Mask,
                POSES,
                [("rank", ones(2, 40), ["poses.shape=(2, 40)"])],
            ),
            (
                "auto-conv",
                lambda: kc.AutoConv2D(4, 3),
                ones(1, 5, 5, 2),
                [
                    ("channels", ones(1, 5, 5, 3), ["axis -1", "value 2", "(1, 5, 5, 3)"]),
                    ("rank", ones(1, 5, 5), ["expected min_ndim=4", "(1, 5, 5)"]),
                ],
            ),
        ]
        for kind, bad, parts in rows
    ),
]


def _forbid_ops(monkeypatch):
    """Every public `keras.ops` function raises while a case runs."""

    def forbidden(name):
        def op(*args, **kwargs):
            raise AssertionError(f"keras.ops.{name} ran before the argument check")

        return op

    for name in dir(keras.ops):
        if not name.startswith("_") and callable(getattr(keras.ops, name)):
            monkeypatch.setattr(keras.ops, name, forbidden(name))


def test_the_table_is_large():
    assert len(CASES) >= 60
    assert len({case_id for case_id, _, _ in CASES}) == len(CASES)


@pytest.mark.one_backend  # checks made before any computation: the same Python on every backend
@pytest.mark.parametrize("setup, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_named_error(setup, expected, monkeypatch):
    thunk = setup()
    with monkeypatch.context() as patch:
        _forbid_ops(patch)
        with pytest.raises((ValueError, TypeError)) as info:
            thunk()
    message = str(info.value)
    for part in expected:
        assert part in message, (part, message)


# What a built layer still takes: another batch size, and the sizes its
# weights do not fix (children with shared transforms, grids of the layers
# that slide or pool, capsules of the weightless layers).
STILL_ACCEPTED = [
    ("capsule-batch", lambda: kc.Capsule(3, 4), ones(2, 6, 8), ones(5, 6, 8), (5, 3, 4)),
    (
        "capsule-shared-in-caps",
        lambda: kc.Capsule(3, 4, share_weights=True),
        ones(2, 6, 8),
        ones(2, 9, 8),
        (2, 3, 4),
    ),
    (
        "capsule-activations-batch",
        lambda: kc.Capsule(3, 4, router="em", return_activations=True),
        [ones(2, 6, 4), ones(2, 6)],
        [ones(3, 6, 4), ones(3, 6)],
        (3, 3, 4),
    ),
    (
        "heinsen-shared-in-caps",
        lambda: kc.HeinsenCapsule(3, 4, share_weights=True),
        [ones(2, 6, 4, 4), ones(2, 6)],
        [ones(2, 9, 4, 4), ones(2, 9)],
        (2, 3, 4, 4),
    ),
    (
        "primary-grid",
        lambda: kc.PrimaryCapsule(2, 4, 3),
        ones(1, 5, 5, 3),
        ones(2, 7, 7, 3),
        (2, 50, 4),
    ),
    ("attention-n", lambda: kc.CapsuleAttention(2), ones(2, 6, 8), ones(2, 9, 8), (2, 9, 8)),
    (
        "class-matrix-grid",
        lambda: kc.ClassMatrixCapsule(3),
        [ones(1, 2, 2, 3, 16), ones(1, 2, 2, 3)],
        [ones(2, 3, 3, 3, 16), ones(2, 3, 3, 3)],
        (2, 3, 16),
    ),
    (
        "local-grid",
        lambda: kc.LocalCapsule2D(2, 4, 3),
        ones(1, 5, 5, 2, 3),
        ones(2, 7, 7, 2, 3),
        (2, 7, 7, 2, 4),
    ),
    ("length-rank", kc.Length, ones(2, 3, 4), ones(2, 5, 3, 4), (2, 5, 3)),
    ("squash-rank", kc.Squash, ones(2, 3, 4), ones(2, 5, 3, 4), (2, 5, 3, 4)),
    ("pruning-n", kc.CapsulePruning, ones(2, 3, 4), ones(2, 6, 4), (2, 6, 4)),
]


@pytest.mark.parametrize(
    "make, first, other, expected",
    [c[1:] for c in STILL_ACCEPTED],
    ids=[c[0] for c in STILL_ACCEPTED],
)
def test_a_built_layer_still_takes_the_sizes_it_allows(make, first, other, expected):
    layer = make()
    layer(first)
    outputs = keras.tree.flatten(layer(other))
    assert tuple(outputs[0].shape) == expected


def test_a_built_capsule_layer_still_takes_a_mask():
    layer = kc.Capsule(3, 4)
    layer(ones(2, 6, 8))
    mask = np.array([[True] * 6, [True] * 3 + [False] * 3])
    poses = keras.ops.convert_to_numpy(layer(ones(2, 6, 8), mask=mask))
    assert poses.shape == (2, 3, 4) and np.isfinite(poses).all()
    # The dropped children take no part: the second sample's parents differ.
    assert not np.allclose(poses[0], poses[1])


# Values from hyperparameter sweeps arrive as NumPy numbers (item 10).
NUMPY_NUMBERS = [
    (
        lambda: kc.DynamicRouting(
            iterations=np.int64(3), temperature=np.float32(2.0), step_size=np.float64(0.5)
        ),
        {"iterations": 3, "temperature": 2.0, "step_size": 0.5},
    ),
    (lambda: kc.Capsule(np.int64(3), np.int64(8)), {"num_capsules": 3, "capsule_dim": 8}),
    (lambda: kc.SparseAttentionRouting(top_k=np.int32(2)), {"top_k": 2}),
    (
        lambda: kc.PrimaryCapsule(4, 8, np.int64(3), strides=(np.int32(2), 1)),
        {"kernel_size": (3, 3), "strides": (2, 1)},
    ),
    (
        lambda: kc.EMRouting(np.int64(2), inverse_temperature=np.float32(0.5)),
        {"iterations": 2, "inverse_temperature": 0.5},
    ),
    (
        lambda: kc.CapsuleAttention(np.int16(2), top_k=np.uint8(3), window_size=np.int64(5)),
        {"num_heads": 2, "top_k": 3, "window_size": 5},
    ),
    (lambda: kc.Length(epsilon=np.float32(1e-6)), {"epsilon": float(np.float32(1e-6))}),
    (lambda: kc.CapsulePruning(np.float32(0.5)), {"threshold": 0.5}),
    (
        lambda: kc.MarginLoss(np.float32(0.75), np.float64(0.25), np.int64(1)),
        {"m_plus": 0.75, "m_minus": 0.25, "down_weight": 1.0},
    ),
    (
        lambda: kc.ConvCapsule2D(np.int64(2), np.int64(4), (np.int64(3), 3)),
        {"num_capsules": 2, "capsule_dim": 4, "kernel_size": (3, 3)},
    ),
]


@pytest.mark.parametrize("make, expected", NUMPY_NUMBERS)
def test_numpy_numbers_are_accepted_and_stored_as_python_numbers(make, expected):
    config = make().get_config()
    for name, value in expected.items():
        assert config[name] == value and type(config[name]) is type(value), (name, config[name])
    json.dumps({k: config[k] for k in expected})  # plain Python numbers
