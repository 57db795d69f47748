"""Parity cases of the quaternion capsules: QuaternionRouting (one and
three iterations, with and without child activations) and
QuaternionCapsule. The votes of the iterations before the last are
stopped-gradient votes in the library: their finite differences hold them
at the unperturbed inputs (`grad_reference`)."""

import numpy as np

import keras_capsules
from tests.parity.registry import Case, register, stateless
from tests.reference import quaternion as ref


def unit_clusters(rng, shape, parents_axis_size):
    """Unit quaternions (..., parents, 4) spread around one random rotation
    per parent: a mean with a clear eigenvalue gap, as trained votes have."""
    centres = rng.normal(size=(parents_axis_size, 4))
    q = centres + 0.4 * rng.normal(size=shape + (parents_axis_size, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def _routing_inputs(rng, with_activations):
    arrays = {
        "votes": unit_clusters(rng, (2, 6), 3),
        "alpha": np.array(1.0 + 0.5 * rng.normal()),
        "beta": np.array(1.0 + 0.5 * rng.normal()),
    }
    if with_activations:
        arrays["activations"] = rng.uniform(0.3, 1.0, size=(2, 6))
    return arrays


for _iterations in (1, 3):
    for _with in (False, True):
        register(
            Case(
                name=f"quaternion-routing-i{_iterations}{'-activations' if _with else ''}",
                inputs=lambda rng, w=_with: _routing_inputs(rng, w),
                build=lambda it=_iterations: keras_capsules.routing.QuaternionRouting(it),
                reference=lambda a, it=_iterations: list(
                    ref.quaternion_routing(
                        a["votes"], a.get("activations"), a["alpha"], a["beta"], it
                    )
                ),
                grad_reference=lambda a, a0, it=_iterations: list(
                    ref.quaternion_routing(
                        a["votes"], a.get("activations"), a["alpha"], a["beta"], it, a0["votes"]
                    )
                ),
                forward=lambda layer, t: list(
                    stateless(layer, t, t["votes"], t.get("activations"), return_coefficients=True)
                ),
                diff=("votes", "alpha", "beta") + (("activations",) if _with else ()),
            )
        )


# The closed-form means (keras_capsules.small_eigen) against the same
# float64 reference as eigh's.
register(
    Case(
        name="quaternion-routing-i3-activations-closed-form",
        inputs=lambda rng: _routing_inputs(rng, True),
        build=lambda: keras_capsules.routing.QuaternionRouting(3, closed_form=True),
        reference=lambda a: list(
            ref.quaternion_routing(a["votes"], a["activations"], a["alpha"], a["beta"], 3)
        ),
        grad_reference=lambda a, a0: list(
            ref.quaternion_routing(
                a["votes"], a["activations"], a["alpha"], a["beta"], 3, a0["votes"]
            )
        ),
        forward=lambda layer, t: list(
            stateless(layer, t, t["votes"], t["activations"], return_coefficients=True)
        ),
        diff=("votes", "alpha", "beta", "activations"),
    )
)


def _capsule_inputs(rng):
    return {
        "offsets": rng.normal(size=(2, 3, 5, 3)),
        "poses": unit_clusters(rng, (2, 3, 5), 2),
        "activations": rng.uniform(0.3, 1.0, size=(2, 3, 5, 2)),
        "kernel_1": 0.5 * rng.normal(size=(6, 4)),
        "bias_1": 0.2 * rng.normal(size=(4,)),
        "kernel_2": 0.5 * rng.normal(size=(4, 2 * 4 * 4)),
        "bias_2": 0.5 + 0.2 * rng.normal(size=(32,)),
        "alpha": np.array(1.2),
        "beta": np.array(0.8),
    }


register(
    Case(
        name="quaternion-capsule",
        inputs=_capsule_inputs,
        build=lambda: keras_capsules.layers.QuaternionCapsule(
            4, router=keras_capsules.routing.QuaternionRouting(2)
        ),
        reference=lambda a: ref.quaternion_capsule(a, 4, 2),
        grad_reference=lambda a, a0: ref.quaternion_capsule(a, 4, 2, stopped_inputs=a0),
        forward=lambda layer, t: list(
            stateless(layer, t, [t["offsets"], t["poses"], t["activations"]])
        ),
        diff=("offsets", "poses", "activations", "kernel_1", "bias_1", "kernel_2", "bias_2")
        + ("alpha", "beta"),
        # Poses are unit quaternions: 1e-5 of their length. Float32
        # eigenvectors of the patch means carry ~4e-6 into every component.
        atol=1e-5,
    )
)


def _surface_points(rng):
    # Points on a bumpy ellipsoid: neighbourhoods with three distinct
    # principal axes, so that every frame is well defined.
    p = rng.normal(size=(2, 40, 3))
    p /= np.linalg.norm(p, axis=-1, keepdims=True)
    p *= 1 + 0.1 * np.sin(3 * p[..., :1]) * np.cos(2 * p[..., 1:2])
    return {"points": p * np.array([1.5, 1.0, 0.6])}


register(
    Case(
        name="local-reference-frames",
        inputs=_surface_points,
        build=lambda: keras_capsules.layers.LocalReferenceFrames(10),
        reference=lambda a: [
            ref.positive_real(ref.from_rotation_matrix(ref.local_reference_frames(a["points"], 10)))
        ],
        forward=lambda layer, t: [layer(t["points"])],
    )
)


register(
    Case(
        name="local-reference-frames-closed-form",
        inputs=_surface_points,
        build=lambda: keras_capsules.layers.LocalReferenceFrames(10, closed_form=True),
        reference=lambda a: [
            ref.positive_real(ref.from_rotation_matrix(ref.local_reference_frames(a["points"], 10)))
        ],
        forward=lambda layer, t: [layer(t["points"])],
    )
)
