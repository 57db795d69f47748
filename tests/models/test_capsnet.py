"""CapsNet: the model harness, the paper's size, its sizes' checks."""

import numpy as np
import pytest

from keras_capsules.models import CapsNet
from tests.models.builders import batch, tiny_capsnet
from tests.test_case import ModelTestCase, to_numpy


class TestCapsNet(ModelTestCase):
    def test_model(self):
        images, labels = batch((20, 20, 1))
        # A short config: the router gets the model's dtype policy (an
        # instance keeps its own).
        router = {"class_name": "self_attention", "config": {"temperature": 2.0}}
        run = self.run_model_test(
            lambda **kwargs: tiny_capsnet(router=router, **kwargs),
            images,
            labels,
            (8, 3),
            batch_size=4,
            epochs=3,
            same_outputs=lambda model: model.reconstruct(images, labels),
        )
        losses = run.history["loss"]
        assert losses[-1] < losses[0], losses
        # The reconstruction term reaches the decoder through compute_loss.
        for w in run.model.decoder.weights:
            assert np.abs(to_numpy(w) - run.initial(w)).max() > 0, w.path


def test_capsnet_paper_parameter_count():
    model = CapsNet()
    assert model.count_params() == 8_215_568
    assert model.count_params() - model.decoder.count_params() == 6_804_224


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
