"""The convolution implementation choice (keras_capsules.conv)."""

import keras
import numpy as np
import pytest

from keras_capsules.conv import conv2d, resolve_implementation, ynn_convolutions_off
from keras_capsules.layers import PrimaryCapsule
from tests.test_case import BACKEND, gradients, to_numpy

# (height, width, kernel, strides, padding): CapsNet's primary conv (small),
# "same" with odd sizes, kernels smaller than the stride, mixed strides.
SPACE_TO_DEPTH_CASES = [
    (20, 21, (9, 9), (2, 2), "valid"),
    (13, 14, (4, 4), (3, 3), "same"),
    (9, 10, (3, 3), (2, 2), "same"),
    (10, 11, (5, 5), (1, 1), "valid"),
    (7, 8, (1, 1), (2, 2), "valid"),
    (8, 7, (2, 2), (3, 3), "same"),
    (9, 9, (3, 2), (1, 2), "valid"),
    (9, 8, (3, 3), (2, 1), "same"),
]


@pytest.mark.parametrize("h, w, kernel_size, strides, padding", SPACE_TO_DEPTH_CASES)
def test_space_to_depth_values_and_gradients_match_the_native_conv(
    h, w, kernel_size, strides, padding
):
    rng = np.random.default_rng(0)
    tensors = {
        "x": keras.ops.convert_to_tensor(rng.normal(size=(2, h, w, 3)), "float32"),
        "kernel": keras.ops.convert_to_tensor(rng.normal(size=(*kernel_size, 3, 4)), "float32"),
    }
    weights = keras.ops.convert_to_tensor(rng.normal(size=(4,)), "float32")
    results = {}
    for implementation in ("conv", "space_to_depth"):

        def loss(t, implementation=implementation):
            y = conv2d(t["x"], t["kernel"], strides, padding, implementation)
            # Weighted, so the gradients depend on which output is which.
            return keras.ops.sum(keras.ops.sin(y) * weights)

        y = conv2d(tensors["x"], tensors["kernel"], strides, padding, implementation)
        results[implementation] = (to_numpy(y), gradients(loss, tensors, ("x", "kernel")))
    (y_conv, g_conv), (y_s2d, g_s2d) = results["conv"], results["space_to_depth"]
    assert y_s2d.shape == y_conv.shape
    np.testing.assert_allclose(y_s2d, y_conv, rtol=1e-4, atol=1e-4)
    for k in ("x", "kernel"):
        np.testing.assert_allclose(
            to_numpy(g_s2d[k]),
            to_numpy(g_conv[k]),
            rtol=1e-4,
            atol=1e-4,
            err_msg=f"gradient of {k}",
        )


def test_auto_rule_per_backend_and_xla_hint(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert resolve_implementation("conv", (2, 2), xla=True) == "conv"
    assert resolve_implementation("space_to_depth", (1, 1)) == "space_to_depth"
    # On CPU here. Strided: unknown, known with and without XLA.
    expected = {
        "tensorflow": ("space_to_depth", "matmul", "conv"),
        "jax": ("matmul",) * 3,
        "torch": ("hybrid",) * 3,
    }[BACKEND]
    assert (
        tuple(resolve_implementation("auto", (2, 2), xla=x) for x in (None, True, False))
        == expected
    )
    assert resolve_implementation("auto", (1, 2)) == expected[0]  # one axis strided
    stride_1 = "matmul" if BACKEND == "jax" else "conv"
    assert {resolve_implementation("auto", (1, 1), xla=x) for x in (None, True, False)} == {
        stride_1
    }
    with pytest.raises(ValueError, match="implementation='fft'"):
        PrimaryCapsule(2, 4, 3, implementation="fft")


@pytest.mark.parametrize(
    "flags, off",
    [
        ("", False),
        ("--xla_cpu_experimental_ynn_fusion_type=-individual_convolution", True),
        ("--xla_dump_to=/tmp/x --xla_cpu_experimental_ynn_fusion_type=", True),
        ("--xla_cpu_experimental_ynn_fusion_type=individual_convolution", False),
        ("--xla_cpu_experimental_ynn_fusion_type=individual_dot", True),
        ("--xla_cpu_experimental_ynn_fusion_type=-individual_dot", False),
    ],
)
def test_jax_stride_1_rule_follows_the_ynn_flag(monkeypatch, flags, off):
    assert ynn_convolutions_off(flags) is off
    monkeypatch.setenv("XLA_FLAGS", flags)
    expected = {"jax": "conv" if off else "matmul"}.get(BACKEND, "conv")
    assert resolve_implementation("auto", (1, 1)) == expected
    # Strided convs keep their rule: XLA's strided input gradient is slow.
    assert resolve_implementation("auto", (2, 2), xla=True) != "conv"


@pytest.mark.parametrize(
    "kernel, stride, padding",
    [
        (4, 2, "same"),
        (3, 2, "valid"),
        (3, 2, "same"),
        (5, 3, "same"),
        (4, 3, "valid"),
        (2, 2, "same"),
        (1, 1, "same"),
    ],
)
@pytest.mark.parametrize("implementation", ["matmul", "hybrid", "space_to_depth"])
def test_conv2d_transpose_subpixel_matches_native(kernel, stride, padding, implementation):
    from keras_capsules.conv import conv2d_transpose

    rng = np.random.default_rng(kernel * 10 + stride)
    x = rng.normal(size=(2, 5, 4, 3)).astype("float32")
    k = rng.normal(size=(kernel, kernel, 6, 3)).astype("float32")
    expected = keras.ops.conv_transpose(x, k, strides=stride, padding=padding)
    actual = conv2d_transpose(x, k, (stride, stride), padding, implementation)
    np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), rtol=1e-5, atol=1e-5)
