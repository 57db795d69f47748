"""Extreme inputs: every router, every layer with math and the three ready
models give finite outputs, gradients and weights after one optimizer step
for zero inputs, inputs scaled by 1e4 and by 1e-8, under the float32,
mixed_float16 and mixed_bfloat16 policies.

The three scales are stacked along the batch axis (examples are routed
independently), and each group of layers is one model, so a group costs
one gradient program per policy. On JAX each program is an XLA compile of
5-50 s on a busy 2-core machine (the whole matrix: ~230 s), so JAX runs
every router and layer in float32, the routers (float32 routing and
weights) under both half policies and the vector-capsule layers (upcast
norms and softmaxes) under mixed_bfloat16; TensorFlow and torch run the
full matrix, the three models included (~15 s each).
"""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.layers import (
    AutoConv2D,
    Capsule,
    CapsuleAttention,
    CapsulePruning,
    ClassMatrixCapsule,
    ConvCapsule1D,
    ConvCapsule2D,
    ConvMatrixCapsule,
    Length,
    Mask,
    PrimaryCapsule,
    PrimaryMatrixCapsule,
)
from keras_capsules.routing import (
    DynamicRouting,
    EMRouting,
    InvertedDotProductRouting,
    SelfAttentionRouting,
    SelfRouting,
    SparseAttentionRouting,
)
from tests.test_case import as_list, to_numpy

SCALES = (0.0, 1e4, 1e-8)
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
BATCH = 2  # per scale
RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.normal(size=(BATCH, *shape)).astype("float32")


def _uniform(*shape):
    return RNG.uniform(size=(BATCH, *shape)).astype("float32")


def routers():
    """Every router, on votes (6 children, 3 parents, dim 4) and activations."""
    votes, activations = keras.Input((6, 3, 4)), keras.Input((6,))
    outputs = []
    for router in (
        DynamicRouting(),
        DynamicRouting(agreement="cosine", stop_gradient=True),
        DynamicRouting(agreement="euclidean"),
        EMRouting(iterations=2),
        InvertedDotProductRouting(),
        SelfAttentionRouting(),
        SelfRouting(),
        SparseAttentionRouting(),
        SparseAttentionRouting(top_k=2),
    ):
        outputs += list(router(votes, activations))
    return keras.Model([votes, activations], outputs), [_normal(6, 3, 4), _uniform(6)]


def capsule_layers():
    """The layers on capsule vectors `(batch, 6, 4)`."""
    poses, activations = keras.Input((6, 4)), keras.Input((6,))
    labels = keras.Input((), dtype="int32")
    outputs = [
        Capsule(3, 4)(poses),
        Capsule(3, 4, router=EMRouting(iterations=2), share_weights=True)([poses, activations]),
        Capsule(3, 4, router=SparseAttentionRouting(), orthogonal=True)(poses),
        Length()(poses),
        Mask()(poses),
        Mask()([poses, labels]),
        CapsuleAttention(2)(poses),
        CapsuleAttention(2, top_k=3, window_size=3, squash_output=True)(poses),
        CapsulePruning(0.9)(poses),
        ConvCapsule1D(2, 3, 3)([poses, activations]),
    ]
    inputs = [_normal(6, 4), _uniform(6), np.arange(BATCH, dtype="int32") % 6]
    return keras.Model([poses, activations, labels], outputs), inputs


def grid_layers():
    """The layers on images and capsule grids."""
    images = keras.Input((6, 6, 2))
    grid, grid_activations = keras.Input((4, 4, 2, 4)), keras.Input((4, 4, 2))
    matrices, matrix_activations = keras.Input((3, 3, 2, 16)), keras.Input((3, 3, 2))
    outputs = [
        PrimaryCapsule(2, 4, 3, strides=2)(images),
        AutoConv2D(4, 3, strides=2)(images),
        *PrimaryMatrixCapsule(2, 3)(images),
        ConvCapsule2D(2, 4, 3)(grid),
        *ConvCapsule2D(2, 4, 3, router=EMRouting(iterations=2), return_activations=True)(
            [grid, grid_activations]
        ),
        *ConvMatrixCapsule(2, 3)([matrices, matrix_activations]),
        *ClassMatrixCapsule(3)([matrices, matrix_activations]),
    ]
    inputs = [
        _normal(6, 6, 2),
        _normal(4, 4, 2, 4),
        _uniform(4, 4, 2),
        _normal(3, 3, 2, 16),
        _uniform(3, 3, 2),
    ]
    model = keras.Model([images, grid, grid_activations, matrices, matrix_activations], outputs)
    return model, inputs


def capsnet():
    model = kc.CapsNet(
        (20, 20, 1),
        3,
        conv_filters=4,
        primary_capsules=2,
        primary_dim=4,
        capsule_dim=4,
        decoder_units=(8,),
    )
    return model, [_uniform(20, 20, 1)]


def efficient_capsnet():
    return kc.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,)), [_uniform(16, 16, 1)]


def matrix_capsnet():
    model = kc.MatrixCapsNet(
        conv_filters=4,
        primary_capsules=2,
        conv_capsules1=2,
        conv_capsules2=2,
        router={"class_name": "em", "config": {"iterations": 1}},
    )
    return model, [_uniform(32, 32, 2)]


SUBJECTS = {
    "routers": routers,
    "capsule_layers": capsule_layers,
    "grid_layers": grid_layers,
    "CapsNet": capsnet,
    "EfficientCapsNet": efficient_capsnet,
    "MatrixCapsNet": matrix_capsnet,
}


# (subject, policy) pairs JAX runs; see the module docstring.
JAX_CASES = {
    *(("routers", p) for p in POLICIES),
    ("capsule_layers", "float32"),
    ("capsule_layers", "mixed_bfloat16"),
    ("grid_layers", "float32"),
}


def _scaled(inputs):
    """Each float input repeated once per scale along the batch axis."""
    return [
        np.concatenate([x * np.float32(s) for s in SCALES])
        if x.dtype == np.float32
        else np.concatenate([x] * len(SCALES))
        for x in inputs
    ]


def _cotangent(shape):
    """A fixed cotangent with entries of both signs, none zero."""
    return np.cos(np.arange(np.prod(shape)) + 0.5).reshape(shape).astype("float32")


def _assert_finite(arrays, what):
    for name, a in arrays:
        a = np.asarray(a, np.float64)
        bad = ~np.isfinite(a)
        if bad.any():
            # Which scales (blocks of the batch axis) went non-finite.
            scales = (
                sorted({SCALES[i // BATCH] for i in np.argwhere(bad)[:, 0]})
                if (a.ndim and a.shape[0] == BATCH * len(SCALES))
                else "all"
            )
            raise AssertionError(f"non-finite {what} {name} (scales {scales})")


def _outputs_and_gradients(forward, tensors, diff):
    """`forward(tensors)` (a list of outputs, as float32 NumPy arrays) and
    the gradients of `sum_k mean(outputs[k] * cotangent_k)` with respect to
    `tensors[d]`, `d` in `diff`. On JAX one jitted program computes both
    (compiling costs more than running these tiny shapes)."""
    backend = keras.backend.backend()

    def loss_and_outputs(t):
        outputs = [keras.ops.cast(o, "float32") for o in forward(t)]
        loss = sum(
            keras.ops.mean(o * keras.ops.convert_to_tensor(_cotangent(o.shape))) for o in outputs
        )
        return loss, outputs

    if backend == "jax":
        import jax

        def loss_fn(diff_values):
            return loss_and_outputs({**tensors, **diff_values})

        diff_values = {k: tensors[k] for k in diff}
        # XLA's CPU compile dominates; without its expensive passes it takes
        # half the time (the programs compute the same values).
        compiled = (
            jax.jit(jax.value_and_grad(loss_fn, has_aux=True))
            .lower(diff_values)
            .compile(
                compiler_options={
                    "xla_backend_optimization_level": 0,
                    "xla_llvm_disable_expensive_passes": True,
                }
            )
        )
        (_, outputs), grads = compiled(diff_values)
    elif backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            for k in diff:
                tape.watch(tensors[k])
            loss, outputs = loss_and_outputs(tensors)
        grads = dict(zip(diff, tape.gradient(loss, [tensors[k] for k in diff])))
    else:
        tensors = {k: t.detach().clone().requires_grad_(k in diff) for k, t in tensors.items()}
        loss, outputs = loss_and_outputs(tensors)
        import torch

        grads = dict(
            zip(diff, torch.autograd.grad(loss, [tensors[k] for k in diff], allow_unused=True))
        )
        outputs = [o.detach() for o in outputs]
    # An input or weight that does not reach the outputs has no gradient.
    grads = {k: np.zeros(tensors[k].shape) if g is None else to_numpy(g) for k, g in grads.items()}
    return [to_numpy(o) for o in outputs], grads


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("subject", list(SUBJECTS))
def test_outputs_gradients_and_step_are_finite(subject, policy):
    if keras.backend.backend() == "jax" and (subject, policy) not in JAX_CASES:
        pytest.skip("covered on TensorFlow and torch; XLA compiles cost too much here")
    # Fixed weights: with 1e4 inputs a float16 conv's output can reach float16's
    # max (65504) for some initialisations, so the result must not depend on
    # which tests ran before (they move Keras's global random state).
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy(policy)
    model, inputs = SUBJECTS[subject]()
    inputs = _scaled(inputs)
    trainable = model.trainable_variables
    non_trainable = [v.value for v in model.non_trainable_variables]
    tensors = {f"x{i}": keras.ops.convert_to_tensor(x) for i, x in enumerate(inputs)}
    tensors.update({f"w{i}": keras.ops.convert_to_tensor(v.value) for i, v in enumerate(trainable)})

    def forward(t):
        outputs, _ = model.stateless_call(
            [t[f"w{i}"] for i in range(len(trainable))],
            non_trainable,
            [t[f"x{i}"] for i in range(len(inputs))],
            training=True,
        )
        return as_list(outputs)

    diff = [f"x{i}" for i, x in enumerate(inputs) if x.dtype == np.float32]
    diff += [f"w{i}" for i in range(len(trainable))]
    outputs, grads = _outputs_and_gradients(forward, tensors, diff)
    _assert_finite([(f"outputs[{i}]", o) for i, o in enumerate(outputs)], "output")
    _assert_finite([(k, grads[k]) for k in diff], "gradient of")

    optimizer = keras.optimizers.SGD(0.01)
    optimizer.apply(
        [keras.ops.convert_to_tensor(grads[f"w{i}"], "float32") for i in range(len(trainable))],
        trainable,
    )
    _assert_finite([(v.path, to_numpy(v.value)) for v in model.weights], "weight")
