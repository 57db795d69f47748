"""Parity cases of the volumetric layers: PrimaryCapsule3D (both forms of
its 3-D convolution) and ConvCapsule3D (windowed routing in 3-D)."""

import itertools

import keras_capsules
from tests.parity.cases_matrix import _register_conv
from tests.parity.registry import Case, register, stateless
from tests.reference import conv as ref_conv
from tests.reference.ops import squash


def _volume_inputs(rng):
    return {
        "volumes": rng.normal(size=(2, 5, 4, 5, 2)),
        "kernel": rng.normal(size=(3, 2, 3, 2, 2 * 3)) * 0.3,
        "bias": rng.normal(size=(2 * 3,)) * 0.1,
    }


def _primary_reference(a, strides, padding):
    y = ref_conv.conv3d(a["volumes"], a["kernel"], strides, padding) + a["bias"]
    return [squash(y.reshape(*y.shape[:4], 2, 3))]


for _impl, _padding, _strides in itertools.product(
    ("conv", "matmul"), ("valid", "same"), ((1, 1, 1), (2, 1, 2))
):
    register(
        Case(
            name=f"primary-capsule-3d-{_impl}-{_padding}-s{''.join(map(str, _strides))}",
            inputs=_volume_inputs,
            build=lambda impl=_impl, padding=_padding, strides=_strides: (
                keras_capsules.layers.PrimaryCapsule3D(
                    2,
                    3,
                    (3, 2, 3),
                    strides=strides,
                    padding=padding,
                    grid=True,
                    implementation=impl,
                )
            ),  # fmt: skip
            reference=lambda a, padding=_padding, strides=_strides: _primary_reference(
                a, strides, padding
            ),
            forward=lambda layer, t: [stateless(layer, t, t["volumes"])],
            diff=("volumes", "kernel", "bias"),
        )
    )

_register_conv("3d-k2-s2-valid", 3, (4, 3, 4), (2, 2, 2), (2, 2, 2), "valid", em=False)
_register_conv("3d-k2x2x3-s1-same-em", 3, (3, 2, 3), (2, 2, 3), (1, 1, 1), "same", em=True)
