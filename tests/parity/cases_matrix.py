"""Parity cases of issue 3: EMRouting, ConvCapsule1D/2D and the matrix layers."""

import keras_capsules
from tests.parity.registry import Case, register, stateless
from tests.reference import conv_capsule as ref_conv
from tests.reference import dynamic as ref_dynamic
from tests.reference import em as ref_em
from tests.reference import matrix_capsule as ref_matrix


def _em_inputs(dim, with_activations=True):
    def inputs(rng):
        arrays = {
            "votes": rng.normal(size=(2, 5, 3, dim)),
            "beta_u": rng.normal(size=(3,)) * 0.5,
            "beta_a": rng.normal(size=(3,)) * 0.5,
        }
        if with_activations:
            arrays["activations"] = rng.uniform(0.1, 0.9, size=(2, 5))
        return arrays

    return inputs


# With 16 pose elements the E-step log-likelihoods sum 16 terms and reach
# |log_p| ~ 1e2 once the assignments sharpen (iteration 3), so float32
# rounding (6e-8 relative) moves the assignment logits by ~1e-5: the float32
# results cannot meet atol=1e-6 there, whatever the implementation.
POSE16_TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def _register_em(name, dim=4, with_activations=True, tolerance=None, backward="manual", **kwargs):
    diff = ("votes", "beta_u", "beta_a") + (("activations",) if with_activations else ())
    register(
        Case(
            name=f"em-{name}" + ("-autodiff" if backward == "autodiff" else ""),
            inputs=_em_inputs(dim, with_activations),
            build=lambda: keras_capsules.routing.EMRouting(backward=backward, **kwargs),
            reference=lambda a: list(
                ref_em.em_routing(
                    a["votes"], a.get("activations"), a["beta_u"], a["beta_a"], **kwargs
                )
            ),
            forward=lambda layer, t: list(
                stateless(layer, t, t["votes"], t.get("activations"), return_coefficients=True)
            ),
            diff=diff,
            **(tolerance or {}),
        )
    )


for _iterations in (1, 2, 3):
    _register_em(f"it{_iterations}", iterations=_iterations)
    _register_em(f"it{_iterations}-lambda2", iterations=_iterations, inverse_temperature=2.0)
_register_em("it3-final-lambda0.5", iterations=3, final_lambda=0.5)
_register_em("it2-lambda-sequence", iterations=2, inverse_temperature=[0.5, 3.0])
_register_em("it2-pose16", dim=16, iterations=2)
_register_em("it3-pose16", dim=16, iterations=3, tolerance=POSE16_TOLERANCE)
_register_em("it2-no-activations", with_activations=False, iterations=2)
# The rows above run the default hand-written backward pass; these the
# backend's automatic differentiation (tests/routing/test_backward.py
# compares the two in every compile mode and option).
_register_em("it3", iterations=3, backward="autodiff")
_register_em("it2-no-activations", with_activations=False, iterations=2, backward="autodiff")


# ConvCapsule1D / ConvCapsule2D: grid, kernel, stride, padding, router.
def _conv_inputs(grid, types, dim, kernel_size, n_out, out_dim, em):
    def inputs(rng):
        arrays = {
            "poses": rng.normal(size=(2, *grid, types, dim)),
            "kernel": rng.normal(size=(*kernel_size, types, n_out, dim, out_dim)) * 0.5,
        }
        if em:
            arrays["activations"] = rng.uniform(0.1, 0.9, size=(2, *grid, types))
            arrays["beta_u"] = rng.normal(size=(n_out,)) * 0.5
            arrays["beta_a"] = rng.normal(size=(n_out,)) * 0.5
        return arrays

    return inputs


def _reference_router(em):
    if em:
        return lambda a: (
            lambda votes, act: ref_em.em_routing(votes, act, a["beta_u"], a["beta_a"], iterations=2)
        )
    return lambda a: lambda votes, act: ref_dynamic.dynamic_routing(votes)


def _register_conv(name, rank, grid, kernel_size, strides, padding, em, plain=False):
    types, dim, n_out, out_dim = 2, 3, 2, 3
    if plain:
        types = 1
    layer_cls = {
        1: keras_capsules.layers.ConvCapsule1D,
        2: keras_capsules.layers.ConvCapsule2D,
        3: keras_capsules.layers.ConvCapsule3D,
    }[rank]
    make_inputs = _conv_inputs(grid, types, dim, kernel_size, n_out, out_dim, em)
    router = _reference_router(em)

    def inputs(rng):
        arrays = make_inputs(rng)
        if plain:
            arrays["poses"] = arrays["poses"][:, :, 0]
        return arrays

    def reference(a):
        poses = a["poses"][:, :, None] if plain else a["poses"]
        return list(
            ref_conv.conv_capsule(
                poses, a["kernel"], kernel_size, strides, padding, router(a), a.get("activations")
            )
        )

    def forward(layer, t):
        x = [t["poses"], t["activations"]] if em else t["poses"]
        return list(stateless(layer, t, x))

    register(
        Case(
            name=f"conv-capsule-{name}",
            inputs=inputs,
            build=lambda: layer_cls(
                n_out,
                out_dim,
                kernel_size,
                strides=strides,
                padding=padding,
                router=keras_capsules.routing.EMRouting(iterations=2) if em else None,
                return_activations=True,
            ),
            reference=reference,
            forward=forward,
            diff=("poses", "kernel") + (("activations", "beta_u", "beta_a") if em else ()),
        )
    )


_register_conv("2d-k3-s1-valid", 2, (4, 4), (3, 3), (1, 1), "valid", em=False)
_register_conv("2d-k2-s2-valid", 2, (4, 5), (2, 2), (2, 2), "valid", em=False)
_register_conv("2d-k3-s2-same", 2, (4, 5), (3, 3), (2, 2), "same", em=False)
_register_conv("2d-k2x3-s1x2-same-em", 2, (3, 4), (2, 3), (1, 2), "same", em=True)
_register_conv("1d-k3-s2-valid", 1, (7,), (3,), (2,), "valid", em=False)
_register_conv("1d-k2-s1-same-em", 1, (5,), (2,), (1,), "same", em=True)
_register_conv("1d-plain-k3-s1-same", 1, (5,), (3,), (1,), "same", em=False, plain=True)


# Matrix capsule layers (4x4 poses, EMRouting by default).
def _em_route(a, iterations):
    return lambda votes, act: ref_em.em_routing(
        votes, act, a["beta_u"], a["beta_a"], iterations=iterations
    )


def _matrix_grid_inputs(grid, types, kernel_shape, n_out):
    def inputs(rng):
        return {
            "poses": rng.normal(size=(2, *grid, types, 16)),
            "activations": rng.uniform(0.1, 0.9, size=(2, *grid, types)),
            "kernel": rng.normal(size=kernel_shape) * 0.5,
            "beta_u": rng.normal(size=(n_out,)) * 0.5,
            "beta_a": rng.normal(size=(n_out,)) * 0.5,
        }

    return inputs


_MATRIX_DIFF = ("poses", "activations", "kernel", "beta_u", "beta_a")


def _matrix_forward(layer, t):
    return list(stateless(layer, t, [t["poses"], t["activations"]]))


for _kernel, _strides, _padding, _iterations in ((2, 1, "valid", 3), (3, 2, "same", 2)):
    _k = (_kernel, _kernel)
    register(
        Case(
            name=f"conv-matrix-capsule-k{_kernel}-s{_strides}-{_padding}-it{_iterations}",
            inputs=_matrix_grid_inputs((3, 3), 2, (*_k, 2, 2, 4, 4), 2),
            build=lambda k=_kernel, s=_strides, p=_padding, it=_iterations: (
                keras_capsules.layers.ConvMatrixCapsule(
                    2,
                    k,
                    strides=s,
                    padding=p,
                    router=keras_capsules.routing.EMRouting(iterations=it),
                )
            ),
            reference=lambda a, k=_k, s=_strides, p=_padding, it=_iterations: list(
                ref_matrix.conv_matrix_capsule(
                    a["poses"], a["activations"], a["kernel"], k, (s, s), p, _em_route(a, it)
                )
            ),
            forward=_matrix_forward,
            diff=_MATRIX_DIFF,
            **POSE16_TOLERANCE,  # 4x4 poses: 16-term log-likelihoods, as above
        )
    )

for _coordinates in (True, False):
    register(
        Case(
            name="class-matrix-capsule" + ("-coordinates" if _coordinates else ""),
            inputs=_matrix_grid_inputs((2, 3), 2, (2, 3, 4, 4), 3),
            build=lambda c=_coordinates: keras_capsules.layers.ClassMatrixCapsule(
                3, coordinate_addition=c
            ),
            reference=lambda a, c=_coordinates: list(
                ref_matrix.class_matrix_capsule(
                    a["poses"], a["activations"], a["kernel"], _em_route(a, 3), c
                )
            ),
            forward=_matrix_forward,
            diff=_MATRIX_DIFF,
            **POSE16_TOLERANCE,  # 4x4 poses: 16-term log-likelihoods, as above
        )
    )


def _primary_matrix_inputs(size, kernel):
    def inputs(rng):
        return {
            "images": rng.normal(size=(2, size, size, 2)),
            "pose_kernel": rng.normal(size=(kernel, kernel, 2, 2 * 16)) * 0.5,
            "pose_bias": rng.normal(size=(2 * 16,)) * 0.1,
            "activation_kernel": rng.normal(size=(kernel, kernel, 2, 2)) * 0.5,
            "activation_bias": rng.normal(size=(2,)) * 0.1,
        }

    return inputs


def _register_primary_matrix(name, size, kernel, **kwargs):
    conv_args = {k: v for k, v in kwargs.items() if k in ("strides", "padding")}
    register(
        Case(
            name=f"primary-matrix-capsule-{name}",
            inputs=_primary_matrix_inputs(size, kernel),
            build=lambda: keras_capsules.layers.PrimaryMatrixCapsule(
                2, kernel_size=kernel, **kwargs
            ),
            reference=lambda a: list(
                ref_matrix.primary_matrix_capsule(
                    a["images"],
                    a["pose_kernel"],
                    a["pose_bias"],
                    a["activation_kernel"],
                    a["activation_bias"],
                    **conv_args,
                )
            ),
            forward=lambda layer, t: list(stateless(layer, t, t["images"])),
            diff=("images", "pose_kernel", "activation_kernel", "activation_bias"),
        )
    )


_register_primary_matrix("k2", 3, 2)
# Strided: the native conv, strided slices + one matmul, the hybrid and space to
# depth give the same numbers.
for _impl in ("conv", "matmul", "hybrid", "space_to_depth"):
    for _padding in ("valid", "same"):
        _register_primary_matrix(
            f"{_impl}-k3-s2-{_padding}",
            5,
            3,
            strides=(2, 2),
            padding=_padding,
            implementation=_impl,
        )
