"""CapsNet: the paper's size, the dtype policy through saving."""

import numpy as np
import pytest

from keras_capsules.models import CapsNet
from tests.models.test_base import batch, check_policy_round_trip, tiny_capsnet


def test_capsnet_paper_parameter_count():
    model = CapsNet()
    assert model.count_params() == 8_215_568
    assert model.count_params() - model.decoder.count_params() == 6_804_224


@pytest.mark.parametrize("given_as", ["argument", "global"])
def test_dtype_policy_survives_keras_round_trip(given_as):
    images, _ = batch((20, 20, 1), n=2)
    check_policy_round_trip(tiny_capsnet, images, given_as)


def test_sizes_are_checked_and_plain_ints():
    model = CapsNet(
        (20, 20, 1),
        3,
        conv_filters=np.int64(8),
        primary_capsules=2,
        primary_dim=4,
        capsule_dim=4,
        decoder_units=(8,),
    )
    assert type(model.get_config()["conv_filters"]) is int
    with pytest.raises(ValueError, match="primary_dim=0"):
        CapsNet(primary_dim=0)
