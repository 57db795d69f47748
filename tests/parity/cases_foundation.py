"""Parity cases of the foundation: ops, DynamicRouting, Capsule."""

import itertools

import keras_capsules
from keras_capsules import ops as kc_ops
from tests.parity.registry import Case, register, stateless
from tests.reference import conv as ref_conv
from tests.reference import dynamic as ref_dynamic
from tests.reference import ops as ref_ops


def _op_inputs(rng):
    x = rng.normal(size=(3, 5, 4))
    x[0, 0] = 0.0  # a zero vector: values and gradients must stay finite
    x[1, 1] *= 1e-3
    return {"x": x}


for _op in ("safe_norm", "squash", "efficient_squash"):
    register(
        Case(
            name=f"op-{_op}",
            inputs=_op_inputs,
            reference=lambda a, op=_op: [getattr(ref_ops, op)(a["x"])],
            forward=lambda layer, t, op=_op: [getattr(kc_ops, op)(t["x"])],
            diff=("x",),
        )
    )


def _votes(rng):
    return {"votes": rng.normal(size=(2, 5, 3, 4))}


for _agreement, _iterations, _temperature, _stop in itertools.product(
    ("dot", "cosine", "euclidean"), (1, 3), (0.5, 1.0, 2.0), (False, True)
):
    if _iterations == 1 and _stop:
        continue  # identical to stop_gradient=False
    _kwargs = dict(iterations=_iterations, temperature=_temperature, agreement=_agreement)
    register(
        Case(
            name=f"dynamic-{_agreement}-it{_iterations}-t{_temperature}"
            + ("-stopgrad" if _stop else ""),
            inputs=_votes,
            build=lambda kw=_kwargs, s=_stop: keras_capsules.routing.DynamicRouting(
                stop_gradient=s, **kw
            ),
            reference=lambda a, kw=_kwargs: list(ref_dynamic.dynamic_routing(a["votes"], **kw)),
            forward=lambda layer, t: list(layer(t["votes"], return_coefficients=True)),
            grad_reference=lambda a, a0, kw=_kwargs, s=_stop: list(
                ref_dynamic.dynamic_routing(
                    a["votes"], early_votes=a0["votes"] if s else None, **kw
                )
            ),
            diff=("votes",),
        )
    )


# The rows above run the default hand-written backward pass; these run a
# step size other than 1 through it, and the backend's automatic
# differentiation (tests/routing/test_backward.py compares the two
# in every compile mode and option).
for _agreement, _stop, _backward, _step in (
    *((a, False, "manual", 0.5) for a in ("dot", "cosine", "euclidean")),
    *((a, True, "autodiff", 1.0) for a in ("dot", "cosine", "euclidean")),
):
    _kwargs = dict(iterations=3, temperature=0.5, agreement=_agreement, step_size=_step)
    register(
        Case(
            name=f"dynamic-{_agreement}-it3-t0.5-step{_step}-{_backward}"
            + ("-stopgrad" if _stop else ""),
            inputs=_votes,
            build=lambda kw=_kwargs, s=_stop, b=_backward: keras_capsules.routing.DynamicRouting(
                stop_gradient=s, backward=b, **kw
            ),
            reference=lambda a, kw=_kwargs: list(ref_dynamic.dynamic_routing(a["votes"], **kw)),
            forward=lambda layer, t: list(layer(t["votes"], return_coefficients=True)),
            grad_reference=lambda a, a0, kw=_kwargs, s=_stop: list(
                ref_dynamic.dynamic_routing(
                    a["votes"], early_votes=a0["votes"] if s else None, **kw
                )
            ),
            diff=("votes",),
        )
    )


def _capsule_inputs(share):
    def inputs(rng):
        kernel_shape = (3, 4, 5) if share else (6, 3, 4, 5)
        return {
            "poses": rng.normal(size=(2, 6, 4)),
            "kernel": rng.normal(size=kernel_shape) * 0.5,
        }

    return inputs


for _share in (False, True):
    register(
        Case(
            name="capsule-layer" + ("-shared" if _share else ""),
            inputs=_capsule_inputs(_share),
            build=lambda s=_share: keras_capsules.layers.Capsule(
                3, 5, share_weights=s, return_activations=True
            ),
            reference=lambda a: list(
                ref_dynamic.dynamic_routing(ref_dynamic.capsule_votes(a["poses"], a["kernel"]))[:2]
            ),
            forward=lambda layer, t: list(stateless(layer, t, t["poses"])),
            diff=("poses", "kernel"),
        )
    )


def _primary_inputs(rng):
    return {
        "images": rng.normal(size=(2, 7, 6, 3)),
        "kernel": rng.normal(size=(3, 3, 3, 2 * 4)) * 0.3,
        "bias": rng.normal(size=(2 * 4,)) * 0.1,
    }


for _impl, _padding, _strides in itertools.product(
    ("conv", "matmul", "hybrid", "space_to_depth"),
    ("valid", "same"),
    ((1, 1), (2, 2), (2, 1)),
):
    _kwargs = dict(strides=_strides, padding=_padding)
    register(
        Case(
            name=f"primary-capsule-{_impl}-{_padding}-s{_strides[0]}{_strides[1]}",
            inputs=_primary_inputs,
            build=lambda kw=_kwargs, impl=_impl: keras_capsules.layers.PrimaryCapsule(
                2, 4, 3, implementation=impl, **kw
            ),
            reference=lambda a, kw=_kwargs: [
                ref_conv.primary_capsule(a["images"], a["kernel"], a["bias"], 4, **kw)
            ],
            forward=lambda layer, t: [stateless(layer, t, t["images"])],
            diff=("images", "kernel", "bias"),
        )
    )


# AutoConv2D: Keras's Conv2D with the strided conv as slices + one matmul,
# with the kernel gradient as a matmul (hybrid), or as a stride-1 conv of
# stride-sized blocks (space_to_depth).
for _impl, _padding in itertools.product(
    ("conv", "matmul", "hybrid", "space_to_depth"), ("valid", "same")
):
    register(
        Case(
            name=f"strided-conv2d-{_impl}-{_padding}-s21",
            inputs=_primary_inputs,
            build=lambda impl=_impl, padding=_padding: keras_capsules.layers.AutoConv2D(
                8, 3, strides=(2, 1), padding=padding, implementation=impl
            ),
            reference=lambda a, padding=_padding: [
                ref_conv.conv2d(a["images"], a["kernel"], (2, 1), padding) + a["bias"]
            ],
            forward=lambda layer, t: [stateless(layer, t, t["images"])],
            diff=("images", "kernel", "bias"),
        )
    )
