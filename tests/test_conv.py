"""The convolution implementation choice (keras_capsules.conv)."""

import keras
import pytest

from keras_capsules.layers import PrimaryCapsule


def test_primary_capsule_implementation_choice_and_error():
    from keras_capsules.conv import resolve_implementation

    assert resolve_implementation("conv", (2, 2)) == "conv"
    backend = keras.backend.backend()  # on CPU here
    assert resolve_implementation("auto", (1, 1)) == ("matmul" if backend == "jax" else "conv")
    assert resolve_implementation("auto", (2, 2)) == ("hybrid" if backend == "torch" else "matmul")
    with pytest.raises(ValueError, match="implementation='fft'"):
        PrimaryCapsule(2, 4, 3, implementation="fft")
