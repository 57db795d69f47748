"""Parity cases of the attention-family routers."""

import keras_capsules
from tests.parity.registry import Case, register, stateless
from tests.reference import attention as ref


def _votes_and_priors(rng):
    return {"votes": rng.normal(size=(2, 5, 3, 4)), "priors": rng.normal(size=(5, 3)) * 0.1}


# The default hand-written backward pass, and the backend's automatic
# differentiation (tests/routing/test_backward.py compares
# the two in every compile mode and option).
for _temperature, _backward in ((0.5, "manual"), (1.0, "manual"), (0.5, "autodiff")):
    register(
        Case(
            name=f"self-attention-t{_temperature}"
            + ("-autodiff" if _backward == "autodiff" else ""),
            inputs=_votes_and_priors,
            build=lambda t=_temperature, b=_backward: keras_capsules.routing.SelfAttentionRouting(
                temperature=t, backward=b
            ),
            reference=lambda a, t=_temperature: list(
                ref.self_attention_routing(a["votes"], a["priors"], t)
            ),
            forward=lambda layer, t: list(
                stateless(layer, t, t["votes"], return_coefficients=True)
            ),
            diff=("votes", "priors"),
        )
    )

register(
    Case(
        name="self-attention-no-priors",
        inputs=lambda rng: {"votes": rng.normal(size=(2, 5, 3, 4))},
        build=lambda: keras_capsules.routing.SelfAttentionRouting(use_priors=False),
        reference=lambda a: list(ref.self_attention_routing(a["votes"])),
        forward=lambda layer, t: list(layer(t["votes"], return_coefficients=True)),
        diff=("votes",),
    )
)


# --- sparsemax, sparse attention, inverted dot-product, self-routing -------
#
# Sparsemax supports and top-k sets change only where logits cross a
# threshold; inputs are redrawn (deterministically) until every logit is at
# least MARGIN away from one, so finite differences and float32 rounding
# cannot flip them on any backend.

import numpy as np  # noqa: E402

from keras_capsules import layers as kc_layers  # noqa: E402
from keras_capsules import ops as kc_ops  # noqa: E402
from tests.reference import dynamic as ref_dynamic  # noqa: E402

MARGIN = 1e-2


def _well_separated_sparsemax(z, axis=-1):
    """Every |z - tau| > MARGIN, and a third of the slices have a support of
    more than one element (where keras.ops.sparsemax goes wrong)."""
    p = ref.sparsemax(z, axis=axis)
    tau = np.max(z, axis=axis, keepdims=True) - np.max(p, axis=axis, keepdims=True)
    multi = np.mean(np.sum(p > 0, axis=axis) > 1)
    return np.min(np.abs(z - tau)) > MARGIN and multi >= 1 / 3


def _top_k_gap(z, k):
    """Smallest gap between the k-th and (k+1)-th largest along the last axis."""
    s = -np.sort(-z, axis=-1)
    return np.inf if k >= z.shape[-1] else np.min(s[..., k - 1] - s[..., k])


def _redraw(draw, ok):
    def inputs(rng):
        for _ in range(1000):
            arrays = draw(rng)
            if ok(arrays):
                return arrays
        raise RuntimeError("no well-separated draw found")

    return inputs


for _axis in (-1, 1):
    register(
        Case(
            name=f"op-sparsemax-axis{_axis}",
            inputs=_redraw(
                lambda rng: {"x": rng.normal(size=(3, 4, 5)) * 0.6},
                lambda a, ax=_axis: _well_separated_sparsemax(a["x"], ax),
            ),
            reference=lambda a, ax=_axis: [ref.sparsemax(a["x"], axis=ax)],
            forward=lambda layer, t, ax=_axis: [kc_ops.sparsemax(t["x"], axis=ax)],
            diff=("x",),
        )
    )


def _sparse_logits(votes, temperature):
    return ref.agreement_logits(votes) / temperature


for _top_k, _temperature in ((None, 4.0), (None, 8.0), (1, 1.0), (2, 2.0)):
    if _top_k is None:
        _ok = lambda a, t=_temperature: _well_separated_sparsemax(  # noqa: E731
            _sparse_logits(a["votes"], t), axis=2
        )
    else:
        _ok = lambda a, t=_temperature, k=_top_k: (  # noqa: E731
            _top_k_gap(_sparse_logits(a["votes"], t), k) > MARGIN
        )
    register(
        Case(
            name="sparse-attention-"
            + ("sparsemax" if _top_k is None else f"top{_top_k}")
            + f"-t{_temperature}",
            inputs=_redraw(lambda rng: {"votes": rng.normal(size=(2, 5, 3, 4))}, _ok),
            build=lambda k=_top_k, t=_temperature: keras_capsules.routing.SparseAttentionRouting(
                top_k=k, temperature=t
            ),
            reference=lambda a, k=_top_k, t=_temperature: list(
                ref.sparse_attention_routing(a["votes"], t, k)
            ),
            forward=lambda layer, t: list(layer(t["votes"], return_coefficients=True)),
            diff=("votes",),
        )
    )


def _inverted_inputs(rng):
    return {
        "votes": rng.normal(size=(2, 5, 3, 4)),
        "scale": 1.0 + 0.2 * rng.normal(size=(4,)),
        "offset": 0.2 * rng.normal(size=(4,)),
    }


# The default hand-written backward pass, and the backend's automatic
# differentiation (tests/routing/test_backward.py
# compares the two in every compile mode).
for _iterations, _temperature, _backward in (
    (1, 1.0, "manual"),
    (2, 1.0, "manual"),
    (3, 0.5, "manual"),
    (3, 0.5, "autodiff"),
):
    register(
        Case(
            name=f"inverted-dot-product-it{_iterations}-t{_temperature}"
            + ("-autodiff" if _backward == "autodiff" else ""),
            inputs=_inverted_inputs,
            build=lambda i=_iterations, t=_temperature, b=_backward: (
                keras_capsules.routing.InvertedDotProductRouting(
                    iterations=i, temperature=t, backward=b
                )
            ),
            reference=lambda a, i=_iterations, t=_temperature: list(
                ref.inverted_dot_product_routing(a["votes"], a["scale"], a["offset"], i, t)
            ),
            forward=lambda layer, t: list(
                stateless(layer, t, t["votes"], return_coefficients=True)
            ),
            diff=("votes", "scale", "offset"),
        )
    )


for _with_activations in (False, True):

    def _self_routing_inputs(rng, with_activations=_with_activations):
        arrays = {
            "votes": rng.normal(size=(2, 5, 3, 4)),
            "routing_kernel": 0.5 * rng.normal(size=(5, 3, 4)),
            "routing_bias": 0.5 * rng.normal(size=(5, 3)),
        }
        if with_activations:
            arrays["activations"] = rng.uniform(0.1, 1.0, size=(2, 5))
        return arrays

    register(
        Case(
            name="self-routing" + ("-activations" if _with_activations else ""),
            inputs=_self_routing_inputs,
            build=lambda: keras_capsules.routing.SelfRouting(),
            reference=lambda a: list(
                ref.self_routing(
                    a["votes"], a["routing_kernel"], a["routing_bias"], a.get("activations")
                )
            ),
            forward=lambda layer, t: list(
                stateless(layer, t, t["votes"], t.get("activations"), return_coefficients=True)
            ),
            diff=("votes", "routing_kernel", "routing_bias")
            + (("activations",) if _with_activations else ()),
        )
    )


# --- layers: capsule attention, pruning, orthogonal transforms ---------------


def _attention_logits(a, heads):
    x = a["x"]
    batch, n, dim = x.shape
    hd = dim // heads
    q = (x @ a["query_kernel"]).reshape(batch, n, heads, hd).transpose(0, 2, 1, 3)
    k = (x @ a["key_kernel"]).reshape(batch, n, heads, hd).transpose(0, 2, 1, 3)
    return q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)


def _attention_ok(a, heads, top_k, window):
    if top_k is None:
        return True
    logits = _attention_logits(a, heads)
    if window is not None:
        pos = np.arange(logits.shape[-1])
        logits = np.where(np.abs(pos[:, None] - pos) <= window // 2, logits, -1e9)
    return _top_k_gap(logits, top_k) > MARGIN


_ATTENTION = (
    dict(num_heads=2),
    dict(num_heads=2, top_k=3),
    dict(num_heads=1, window_size=3),
    dict(num_heads=2, top_k=2, window_size=5),
    dict(num_heads=4, squash_output=True),
)
for _kw in _ATTENTION:
    register(
        Case(
            name="capsule-attention-" + "-".join(f"{k}{v}" for k, v in _kw.items()),
            inputs=_redraw(
                lambda rng: {
                    "x": rng.normal(size=(2, 6, 8)),
                    "query_kernel": 0.4 * rng.normal(size=(8, 8)),
                    "key_kernel": 0.4 * rng.normal(size=(8, 8)),
                },
                lambda a, kw=_kw: _attention_ok(
                    a, kw["num_heads"], kw.get("top_k"), kw.get("window_size")
                ),
            ),
            build=lambda kw=_kw: kc_layers.CapsuleAttention(**kw),
            reference=lambda a, kw=_kw: list(
                ref.capsule_attention(a["x"], a["query_kernel"], a["key_kernel"], **kw)
            ),
            forward=lambda layer, t: list(
                stateless(layer, t, t["x"], return_attention_scores=True)
            ),
            diff=("x", "query_kernel", "key_kernel"),
        )
    )


def _pruning_inputs(rng):
    x = rng.normal(size=(2, 6, 4))
    x[:, 3] = 2.0 * x[:, 1] + 0.05 * rng.normal(size=(2, 4))  # near-duplicate: pruned
    x[0, 5] = -x[0, 0]  # opposite direction: kept
    x[1, 4] = 0.0  # zero capsule: cosine 0, kept
    return x


def _cosines(x):
    n = np.linalg.norm(x, axis=-1) + 1e-12
    return np.einsum("bid,bjd->bij", x, x) / (n[:, :, None] * n[:, None, :])


register(
    Case(
        name="capsule-pruning",
        inputs=_redraw(
            lambda rng: {"x": _pruning_inputs(rng)},
            lambda a: np.min(np.abs(_cosines(a["x"]) - 0.9)) > 5 * MARGIN,
        ),
        build=lambda: kc_layers.CapsulePruning(threshold=0.9),
        reference=lambda a: [ref.capsule_pruning(a["x"], 0.9)],
        forward=lambda layer, t: [layer(t["x"])],
        diff=("x",),
    )
)

for _rows, _cols in ((2, 4), (4, 3)):
    _n = max(_rows, _cols)
    register(
        Case(
            name=f"op-householder-{_rows}x{_cols}",
            inputs=lambda rng, n=_n: {"v": rng.normal(size=(3, n, n))},
            reference=lambda a, r=_rows, c=_cols: [ref.householder_orthogonal(a["v"], r, c)],
            forward=lambda layer, t, r=_rows, c=_cols: [
                kc_ops.householder_orthogonal(t["v"], r, c)
            ],
            diff=("v",),
        )
    )

for _share in (False, True):
    register(
        Case(
            name="capsule-layer-orthogonal" + ("-shared" if _share else ""),
            inputs=lambda rng, s=_share: {
                "poses": rng.normal(size=(2, 6, 3)),
                "householder": rng.normal(size=(3, 4, 4) if s else (6, 3, 4, 4)),
            },
            build=lambda s=_share: keras_capsules.layers.Capsule(
                3, 4, share_weights=s, orthogonal=True, return_activations=True
            ),
            reference=lambda a: list(
                ref_dynamic.dynamic_routing(
                    ref_dynamic.capsule_votes(
                        a["poses"], ref.householder_orthogonal(a["householder"], 3, 4)
                    )
                )[:2]
            ),
            forward=lambda layer, t: list(stateless(layer, t, t["poses"])),
            diff=("poses", "householder"),
        )
    )


def _orthogonal_conv_inputs(rng):
    return {
        "poses": rng.normal(size=(2, 4, 4, 2, 3)),
        "householder": rng.normal(size=(2, 2, 2, 2, 4, 4)),
    }


register(
    Case(
        name="orthogonal-conv-capsule-2d",
        inputs=_orthogonal_conv_inputs,
        build=lambda: keras_capsules.layers.ConvCapsule2D(
            2,
            4,
            kernel_size=2,
            strides=2,
            orthogonal=True,
            router=keras_capsules.routing.DynamicRouting(iterations=2),
        ),
        reference=lambda a: [ref_conv_capsule_orthogonal(a)],
        forward=lambda layer, t: [stateless(layer, t, t["poses"])],
        diff=("poses", "householder"),
    )
)


def ref_conv_capsule_orthogonal(a):
    from tests.reference.conv_capsule import conv_capsule
    from tests.reference.dynamic import dynamic_routing

    w = ref.householder_orthogonal(a["householder"], 3, 4)
    return conv_capsule(
        a["poses"], w, (2, 2), (2, 2), "valid", lambda v, act: dynamic_routing(v, iterations=2)
    )[0]


def _cross_inputs(with_activations):
    def inputs(rng):
        arrays = {"votes": rng.normal(size=(2, 5, 3, 4)), "queries": rng.normal(size=(3, 4))}
        if with_activations:
            arrays["activations"] = rng.uniform(0.1, 1.0, size=(2, 5))
        return arrays

    return inputs


for _heads, _with_activations in ((1, False), (2, True)):
    register(
        Case(
            name=f"cross-attention-heads{_heads}" + ("-activations" if _with_activations else ""),
            inputs=_cross_inputs(_with_activations),
            build=lambda h=_heads: keras_capsules.routing.CrossAttentionRouting(h),
            reference=lambda a, h=_heads: list(
                ref.cross_attention_routing(a["votes"], a["queries"], h, a.get("activations"))
            ),
            forward=lambda layer, t: list(
                stateless(layer, t, t["votes"], t.get("activations"), return_coefficients=True)
            ),
            diff=("votes", "queries") + (("activations",) if _with_activations else ()),
        )
    )
