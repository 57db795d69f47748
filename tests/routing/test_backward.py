"""The routers' hand-written backward passes equal automatic differentiation.

`DynamicRouting`, `EMRouting`, `SelfAttentionRouting` and
`InvertedDotProductRouting` differentiate their routing by hand
(`backward="manual"`, the default). Their gradients are compared with
those of `backward="autodiff"` in every mode the backend has (TensorFlow:
eager, `tf.function`, XLA; JAX: `jax.jit`; torch: eager): float64 within
1e-9, float32 within 1e-5 (relative to each gradient's largest entry). The
loss is `<poses, gp> + <activations, ga> + <coefficients, gc>`,
differentiated with respect to

- DynamicRouting: the votes (`ga` = 1: `+ sum(lengths)`), for every
  agreement and `stop_gradient`, with a temperature and step size other
  than 1;
- EMRouting: the votes, the child activations, `beta_u` and `beta_a`, with
  and without child activations and for each inverse-temperature option;
- SelfAttentionRouting: the votes and the priors, with and without priors
  and for a temperature other than 1;
- InvertedDotProductRouting: the votes and the LayerNorm's scale and
  offset, for 1-3 iterations and a temperature other than 1.

The parity rows (`tests/parity/cases_foundation.py`, `cases_matrix.py`,
`cases_attention.py`) check both passes against finite differences of the
float64 reference, for more temperatures and iterations.
"""

import contextlib
import functools

import keras
import numpy as np
import pytest
from keras import ops

import keras_capsules
from keras_capsules.routing import (
    DynamicRouting,
    EMRouting,
    InvertedDotProductRouting,
    SelfAttentionRouting,
    dynamic_backward,
    em_backward,
    inverted_dot_product_backward,
    self_attention_backward,
)
from tests.parity.registry import stateless
from tests.test_case import BACKEND, gradients, to_numpy

ROUTERS = {
    "dynamic": DynamicRouting,
    "em": EMRouting,
    "self_attention": SelfAttentionRouting,
    "inverted_dot_product": InvertedDotProductRouting,
}
AGREEMENTS = ("dot", "cosine", "euclidean")  # DynamicRouting's

# JAX op by op is left out: it costs seconds per case and Keras jits on JAX.
MODES = {"tensorflow": ("eager", "graph", "xla"), "jax": ("jit",), "torch": ("eager",)}[BACKEND]
# The options' float64 checks test the math: one mode is enough there (on
# TensorFlow each graph and XLA compilation costs seconds); the float32
# checks run every mode. DynamicRouting's float64 checks run every mode.
MATH_MODES = MODES[:1]


# ------------------------------------------------------------------ helpers


def float64():
    """JAX computes in float32 unless 64-bit types are enabled."""
    if BACKEND == "jax":
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


def relative_error(got, expected):
    return np.max(np.abs(got - expected)) / np.max(np.abs(expected))


def router_gradients(router, arrays, cotangents, mode):
    """`{name: gradient}` of `<poses, gp> + <activations, ga> + <coefficients,
    gc>` (`cotangents`) w.r.t. every array in `arrays`: the votes, the
    activations (when given) and the router's weights, by name; `mode`: one
    of `MODES`."""
    tensors = {k: ops.convert_to_tensor(v) for k, v in arrays.items()}
    gp, ga, gc = (ops.convert_to_tensor(c) for c in cotangents)
    stateless(router, tensors, tensors["votes"], tensors.get("activations"))  # builds

    def loss(t):
        poses, activations, coefficients = stateless(
            router, t, t["votes"], t.get("activations"), return_coefficients=True
        )
        return ops.sum(poses * gp) + ops.sum(activations * ga) + ops.sum(coefficients * gc)

    diff = tuple(tensors)
    if BACKEND == "tensorflow" and mode != "eager":
        import tensorflow as tf

        router.xla = mode == "xla"
        compiled = tf.function(lambda t: gradients(loss, t, diff), jit_compile=mode == "xla")
        return {k: to_numpy(g) for k, g in compiled(tensors).items()}
    return {k: to_numpy(g) for k, g in gradients(loss, tensors, diff).items()}


def votes_gradient(router, votes, cotangents, mode):
    """DynamicRouting's: gradient of `<poses, gp> + <coefficients, gc> +
    sum(lengths)` w.r.t. `votes`, the router called as a layer."""
    gp, gc = (ops.convert_to_tensor(c) for c in cotangents)

    def loss(x):
        poses, lengths, coefficients = router(x, return_coefficients=True)
        return ops.sum(poses * gp) + ops.sum(coefficients * gc) + ops.sum(lengths)

    if BACKEND == "tensorflow":
        import tensorflow as tf

        def grad(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = loss(x)
            return tape.gradient(value, x)

        if mode != "eager":
            router.xla = mode == "xla"
            grad = tf.function(grad, jit_compile=mode == "xla")
        return to_numpy(grad(tf.constant(votes)))
    if BACKEND == "jax":
        import jax

        grad = jax.grad(loss)
        return to_numpy((jax.jit(grad) if mode == "jit" else grad)(votes))
    import torch

    x = torch.tensor(votes, requires_grad=True)
    loss(x).backward()
    return to_numpy(x.grad)


def dynamic_gradients(router, arrays, cotangents, mode):
    """`router_gradients` for DynamicRouting: `{"votes": votes_gradient}`."""
    return {"votes": votes_gradient(router, arrays["votes"], cotangents, mode)}


GRADIENTS = {"dynamic": dynamic_gradients}  # the others: router_gradients


def compare(router, kwargs, arrays, cotangents, tolerance, dtype=None, modes=MODES):
    """Asserts that `ROUTERS[router](**kwargs)`'s gradients (its default,
    hand-written backward) are finite and equal those of
    `backward="autodiff"` within `tolerance` (relative to each gradient's
    largest entry), in each of `modes`."""
    router_class, grads = ROUTERS[router], GRADIENTS.get(router, router_gradients)
    for mode in modes:
        manual = grads(router_class(dtype=dtype, **kwargs), arrays, cotangents, mode)
        automatic = grads(
            router_class(backward="autodiff", dtype=dtype, **kwargs), arrays, cotangents, mode
        )
        for name in arrays:
            assert np.isfinite(manual[name]).all(), (name, mode)
            error = relative_error(manual[name], automatic[name])
            assert error < tolerance, (name, mode, error)


def fused_form_gradients(route, tensors, cotangents):
    """The votes' gradient of the loss `sum <output, cotangent>` over the
    outputs of `route(tensors, fused)`, in the XLA form (sums of broadcast
    products, `fused=True`) and the batched-matmul form (float64)."""
    with float64():
        tensors = {k: ops.convert_to_tensor(v) for k, v in tensors.items()}
        grads = []
        for fused in (False, True):

            def loss(t, fused=fused):
                outputs = route(t, fused)
                return sum(
                    ops.sum(x * ops.convert_to_tensor(g)) for x, g in zip(outputs, cotangents)
                )

            grads.append(to_numpy(gradients(loss, tensors, ("u",))["u"]))
    return grads


# ------------------------------------------------------------------- inputs


def dynamic_inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    votes = rng.normal(size=(2, 7, 4, 5)).astype(dtype)
    cotangents = (
        rng.normal(size=(2, 4, 5)).astype(dtype),
        rng.normal(size=(2, 7, 4)).astype(dtype),
    )
    return {"votes": votes}, cotangents


def em_inputs(dtype, with_activations=True, seed=0, dim=4):
    rng = np.random.default_rng(seed)
    arrays = {
        "votes": rng.normal(size=(2, 6, 3, dim)),
        "beta_u": rng.normal(size=(3,)) * 0.5,
        "beta_a": rng.normal(size=(3,)) * 0.5,
    }
    if with_activations:
        arrays["activations"] = rng.uniform(0.1, 0.9, size=(2, 6))
    cotangents = (rng.normal(size=(2, 3, dim)), rng.normal(size=(2, 3)), rng.normal(size=(2, 6, 3)))
    cast = {k: v.astype(dtype) for k, v in arrays.items()}
    return cast, tuple(c.astype(dtype) for c in cotangents)


def self_attention_inputs(dtype, use_priors=True, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {"votes": rng.normal(size=(2, 6, 3, 5))}
    if use_priors:
        arrays["priors"] = rng.normal(size=(6, 3)) * 0.3
    cotangents = (rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3)), rng.normal(size=(2, 6, 3)))
    return (
        {k: v.astype(dtype) for k, v in arrays.items()},
        tuple(c.astype(dtype) for c in cotangents),
    )


def inverted_dot_product_inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "votes": rng.normal(size=(2, 6, 3, 5)),
        "scale": 1.0 + 0.3 * rng.normal(size=(5,)),
        "offset": 0.3 * rng.normal(size=(5,)),
    }
    cotangents = (rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3)), rng.normal(size=(2, 6, 3)))
    return (
        {k: v.astype(dtype) for k, v in arrays.items()},
        tuple(c.astype(dtype) for c in cotangents),
    )


INPUTS = {
    "dynamic": dynamic_inputs,
    "em": em_inputs,
    "self_attention": self_attention_inputs,
    "inverted_dot_product": inverted_dot_product_inputs,
}


# ---------------------------------------------------------- float64 gradients

EM_OPTIONS = {
    "schedule": dict(iterations=3),
    "lambda2": dict(iterations=3, inverse_temperature=2.0),
    "sequence-eps": dict(iterations=2, inverse_temperature=[0.5, 3.0], epsilon=1e-2),
    "one-iteration": dict(iterations=1),
}
SELF_ATTENTION_OPTIONS = {
    "priors": dict(),
    "priors-t0.5": dict(temperature=0.5),
    "no-priors-t2": dict(use_priors=False, temperature=2.0),
}

# (router, router kwargs, inputs kwargs, modes)
FLOAT64_CASES = [
    # Other temperatures and iteration counts: the parity rows.
    *(
        pytest.param(
            "dynamic",
            dict(
                iterations=3,
                temperature=0.5,
                step_size=0.7,
                agreement=agreement,
                stop_gradient=stop_gradient,
            ),
            {},
            MODES,
            id=f"dynamic-{agreement}-{stop_gradient}",
        )
        for agreement in AGREEMENTS
        for stop_gradient in (False, True)
    ),
    *(
        pytest.param(
            "em",
            EM_OPTIONS[option],
            dict(with_activations=with_activations),
            MATH_MODES,
            id=f"em-{option}-{with_activations}",
        )
        for option in sorted(EM_OPTIONS)
        for with_activations in (True, False)
    ),
    *(
        pytest.param(
            "self_attention",
            SELF_ATTENTION_OPTIONS[option],
            dict(use_priors=SELF_ATTENTION_OPTIONS[option].get("use_priors", True)),
            MATH_MODES,
            id=f"self_attention-{option}",
        )
        for option in sorted(SELF_ATTENTION_OPTIONS)
    ),
    *(
        pytest.param(
            "inverted_dot_product",
            dict(iterations=iterations, temperature=temperature),
            {},
            MATH_MODES,
            id=f"inverted_dot_product-{iterations}-{temperature}",
        )
        for iterations, temperature in ((1, 1.0), (2, 0.5), (3, 2.0))
    ),
]


@pytest.mark.parametrize("router, kwargs, inputs, modes", FLOAT64_CASES)
def test_float64_gradients_equal_autodiff(router, kwargs, inputs, modes):
    arrays, cotangents = INPUTS[router]("float64", **inputs)
    with float64():
        compare(router, kwargs, arrays, cotangents, 1e-9, dtype="float64", modes=modes)


# ---------------------------------------------------------- float32 gradients

# (router, router kwargs, inputs kwargs)
FLOAT32_CASES = [
    *(
        pytest.param("dynamic", dict(agreement=agreement), {}, id=f"dynamic-{agreement}")
        for agreement in AGREEMENTS
    ),
    *(pytest.param("em", dict(iterations=3), dict(dim=dim), id=f"em-{dim}") for dim in (4, 16)),
    pytest.param("self_attention", {}, {}, id="self_attention"),
    pytest.param("inverted_dot_product", dict(iterations=3), {}, id="inverted_dot_product"),
]


@pytest.mark.parametrize("router, kwargs, inputs", FLOAT32_CASES)
def test_float32_gradients_equal_autodiff(router, kwargs, inputs):
    arrays, cotangents = INPUTS[router]("float32", seed=1, **inputs)
    compare(router, kwargs, arrays, cotangents, 1e-5)


# ---------------------------------------------- fused and batched-matmul forms


def dynamic_fused_case(agreement):
    arrays, (gp, gc) = dynamic_inputs("float64", seed=2)
    return (
        lambda t, fused: dynamic_backward.dynamic_routing(
            t["u"], 3, 0.5, agreement, 1.0, False, fused=fused
        ),
        {"u": arrays["votes"].transpose(0, 2, 1, 3)},
        (gp, gc.transpose(0, 2, 1)),  # parent-major, like the votes
    )


def em_fused_case():
    arrays, (gp, ga, gc) = em_inputs("float64", seed=2)
    return (
        lambda t, fused: em_backward.em_routing(
            t["u"], t["a"], t["bu"], t["ba"], [0.3, 0.6, 0.9], 1e-4, fused=fused
        ),
        {
            "u": arrays["votes"].transpose(0, 2, 1, 3),
            "a": arrays["activations"],
            "bu": arrays["beta_u"],
            "ba": arrays["beta_a"],
        },
        (gp, ga, gc.transpose(0, 2, 1)),  # parent-major, like the votes
    )


def self_attention_fused_case():
    arrays, (gp, _, gc) = self_attention_inputs("float64", seed=2)
    return (
        lambda t, fused: self_attention_backward.self_attention_routing(
            t["u"], t["priors"], 0.7, fused=fused
        ),
        {"u": arrays["votes"].transpose(0, 2, 1, 3), "priors": arrays["priors"].T},
        (gp, gc.transpose(0, 2, 1)),  # parent-major, like the votes
    )


def inverted_dot_product_fused_case():
    arrays, (gp, _, gc) = inverted_dot_product_inputs("float64", seed=2)
    return (
        lambda t, fused: inverted_dot_product_backward.inverted_dot_product_routing(
            t["u"], t["scale"], t["offset"], 3, 0.7, 1e-5, fused=fused
        ),
        {
            "u": arrays["votes"].transpose(0, 2, 1, 3),
            "scale": arrays["scale"],
            "offset": arrays["offset"],
        },
        (gp, gp, gc.transpose(0, 2, 1)),  # parent-major, like the votes
    )


FUSED_CASES = {
    **{
        f"dynamic-{agreement}": functools.partial(dynamic_fused_case, agreement)
        for agreement in AGREEMENTS
    },
    "em": em_fused_case,
    "self_attention": self_attention_fused_case,
    "inverted_dot_product": inverted_dot_product_fused_case,
}


@pytest.mark.parametrize("case", FUSED_CASES)
def test_fused_and_matmul_forms_agree(case):
    """The XLA form (sums of broadcast products) and the batched-matmul form
    of the votes' gradient are the same numbers (float64), whichever runs."""
    matmul, fused = fused_form_gradients(*FUSED_CASES[case]())
    assert relative_error(fused, matmul) < 1e-12


# ------------------------------------------------------------ mixed precision

# InvertedDotProductRouting with 3 iterations; the others as constructed.
MAKE_ROUTER = {
    **ROUTERS,
    "inverted_dot_product": functools.partial(InvertedDotProductRouting, iterations=3),
}


@pytest.mark.parametrize("policy", ("mixed_float16", "mixed_bfloat16"))
@pytest.mark.parametrize("router", ROUTERS)
def test_gradients_are_finite_and_close_under_mixed_precision(router, policy):
    """The gradients of a router with the `policy` are finite and close to
    those of the router in float32."""
    make_router, grads = MAKE_ROUTER[router], GRADIENTS.get(router, router_gradients)
    arrays, cotangents = INPUTS[router]("float32", seed=3)
    half = tuple(c.astype(policy.split("_")[1]) for c in cotangents)
    mixed = grads(make_router(dtype=policy), arrays, half, MODES[-1])
    full = grads(make_router(), arrays, cotangents, MODES[-1])
    for name in arrays:
        assert np.isfinite(mixed[name]).all(), name
        # The cotangents and outputs are rounded to the half dtype.
        np.testing.assert_allclose(mixed[name], full[name], atol=5e-2 * np.abs(full[name]).max())


# ---------------------------------------------------- zero and huge votes

# (router, router kwargs, the scale of the huge votes)
HUGE_CASES = [
    *(
        pytest.param("dynamic", dict(agreement=agreement), 1e15, id=f"dynamic-{agreement}")
        for agreement in AGREEMENTS
    ),
    # EM squares the deviations and its gradient divides by var^2: votes of
    # 1e6 (var ~1e12) are within float32's range, 1e15 is not (autodiff
    # gives NaN there too).
    pytest.param("em", {}, 1e6, id="em"),
    # The scale of tests/test_extreme_inputs.py: at 1e8 the agreement
    # logits (~1e16 * in_caps) overflow the float32 softmax's gradient,
    # automatic differentiation's too.
    pytest.param("self_attention", {}, 1e4, id="self_attention"),
    # The scale of tests/test_extreme_inputs.py.
    pytest.param("inverted_dot_product", dict(iterations=3), 1e4, id="inverted_dot_product"),
]


@pytest.mark.parametrize("router, kwargs, scale", HUGE_CASES)
def test_gradients_are_finite_for_zero_and_huge_votes(router, kwargs, scale):
    arrays, cotangents = INPUTS[router]("float32", seed=4)
    arrays["votes"][0] = 0.0
    arrays["votes"][1, :3] *= scale
    grads = GRADIENTS.get(router, router_gradients)
    for name, grad in grads(ROUTERS[router](**kwargs), arrays, cotangents, MODES[-1]).items():
        assert np.isfinite(grad).all(), name


# ----------------------------------------------------------- the option


@pytest.mark.parametrize("router", ROUTERS)
def test_backward_is_validated_and_not_saved(router):
    """`backward` defaults to "manual", is checked, and is a speed option that
    the config does not keep (a saved router loads with "manual")."""
    router_class = ROUTERS[router]
    configured = router_class(backward="autodiff")
    assert "backward" not in configured.get_config()
    assert router_class.from_config(configured.get_config()).backward == "manual"
    assert router_class().backward == "manual"
    with pytest.raises(ValueError, match="backward='symbolic'"):
        router_class(backward="symbolic")


# ------------------------------------------------------------ the XLA hint


def dynamic_capsule():
    """A `Capsule` (DynamicRouting by default) in a model: `set_xla`'s target."""
    capsule = keras_capsules.layers.Capsule(3, 4)
    return keras.Sequential([keras.Input((6, 8)), capsule]), capsule


def em_capsule():
    capsule = keras_capsules.layers.ClassMatrixCapsule(3)  # EMRouting by default
    return capsule, capsule


def capsule_with(router_class):
    capsule = keras_capsules.layers.Capsule(3, 4, router=router_class())
    return capsule, capsule


# router -> (what set_xla is given, the capsule layer in it)
CAPSULES = {
    "dynamic": dynamic_capsule,
    "em": em_capsule,
    "self_attention": functools.partial(capsule_with, SelfAttentionRouting),
    "inverted_dot_product": functools.partial(capsule_with, InvertedDotProductRouting),
}


@pytest.mark.parametrize("router", ROUTERS)
def test_set_xla_reaches_the_router_of_a_capsule_layer(router):
    target, capsule = CAPSULES[router]()
    keras_capsules.models.set_xla(target, True)
    assert isinstance(capsule.router, ROUTERS[router]) and capsule.router.xla is True
