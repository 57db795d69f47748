"""EfficientCapsNet: the paper's size, mixed precision."""

import keras
import numpy as np
import pytest

from keras_capsules.models import EfficientCapsNet
from tests.models.test_base import batch, tiny_efficient
from tests.test_case import jit_compile_for_backend


def test_efficient_capsnet_paper_parameter_count():
    model = EfficientCapsNet()
    assert model.count_encoder_params() == 161_824  # The paper's count.
    assert model.count_params() == 161_824 + 576 + 1_411_344  # + BN stats + decoder.


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_fit_has_finite_loss(policy):
    keras.config.set_dtype_policy(policy)
    model = tiny_efficient()
    # Jitted on JAX (op by op takes 3x longer there: 52 s against 17 s);
    # TensorFlow without XLA, the path its examples take (XLA + mixed: layer tests).
    model.compile(optimizer="adam", jit_compile=jit_compile_for_backend(xla_on_tensorflow=False))
    images, labels = batch(model.image_shape)
    loss = model.fit(images, labels, batch_size=4, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss))
