"""CapsNet: the paper's size."""

from keras_capsules.models import CapsNet


def test_capsnet_paper_parameter_count():
    model = CapsNet()
    assert model.count_params() == 8_215_568
    assert model.count_params() - model.decoder.count_params() == 6_804_224
