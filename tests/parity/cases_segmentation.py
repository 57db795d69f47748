"""Parity cases of SegCaps's layers: LocalCapsule2D and LocalDeconvCapsule2D."""

import keras_capsules
from tests.parity.registry import Case, register, stateless
from tests.reference import segmentation_capsule as ref

TYPES, IN_DIM, PARENTS, DIM = 2, 3, 2, 4


def _inputs(kernel_shape):
    def inputs(rng):
        return {
            "poses": rng.normal(size=(2, 5, 5, TYPES, IN_DIM)) * 0.4,
            "kernel": rng.normal(size=kernel_shape) * 0.3,
            "bias": rng.normal(size=(PARENTS, DIM)) * 0.1,
        }

    return inputs


def _register(name, transposed, kernel_size, strides, padding, iterations):
    layer_class = (
        keras_capsules.layers.LocalDeconvCapsule2D
        if transposed
        else keras_capsules.layers.LocalCapsule2D
    )
    extra = {} if transposed else {"implementation": "conv"}
    k = kernel_size
    kernel_shape = (k, k, PARENTS * DIM, IN_DIM) if transposed else (k, k, IN_DIM, PARENTS * DIM)
    register(
        Case(
            name=f"local-capsule-{name}",
            inputs=_inputs(kernel_shape),
            build=lambda: layer_class(
                PARENTS,
                DIM,
                kernel_size,
                strides=strides,
                padding=padding,
                router=keras_capsules.routing.DynamicRouting(iterations=iterations),
                return_activations=True,
                **extra,
            ),
            reference=lambda a: list(
                ref.local_capsule(
                    a["poses"],
                    a["kernel"],
                    a["bias"],
                    PARENTS,
                    (strides, strides),
                    padding,
                    iterations,
                    transposed,
                )
            ),
            forward=lambda layer, t: list(stateless(layer, t, t["poses"])),
            diff=("poses", "kernel", "bias"),
        )
    )


_register("conv-3x3-s1-same-it3", False, 3, 1, "same", 3)
_register("conv-3x3-s2-valid-it2", False, 3, 2, "valid", 2)
_register("conv-1x1-it1", False, 1, 1, "same", 1)
_register("deconv-4x4-s2-same-it3", True, 4, 2, "same", 3)
_register("deconv-3x3-s2-valid-it2", True, 3, 2, "valid", 2)
