"""`models.set_xla`: the XLA hint reaches every layer and router that reads
it, through the public `Model.layers` and each layer's `router`."""

import keras

from keras_capsules.layers import AutoConv2D, Capsule, PrimaryCapsule
from keras_capsules.models import CapsNet, EfficientCapsNet, MatrixCapsNet, SegCaps, set_xla
from keras_capsules.models.xla import xla_hinted_layers
from keras_capsules.routing import DynamicRouting, EMRouting, SelfAttentionRouting
from keras_capsules.xla_hint import XlaHinted


def test_set_xla_reaches_nested_layers_and_routers():
    capsnet = CapsNet(
        (24, 24, 1),
        3,
        conv_filters=4,
        primary_capsules=2,
        primary_dim=4,
        capsule_dim=4,
        decoder_units=(8,),
    )
    efficient = EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,))
    matrix = MatrixCapsNet(
        conv_filters=2,
        primary_capsules=2,
        conv_capsules1=2,
        conv_capsules2=2,
        router=EMRouting(iterations=1),
    )
    hinted = {
        capsnet: [capsnet.features.get_layer("primary"), capsnet.class_capsules.router],
        efficient: [efficient.features.get_layer(f"conv{i}") for i in (1, 2, 3, 4)]
        + [efficient.class_capsules.router],
        matrix: [matrix.network.get_layer("conv"), matrix.network.get_layer("primary_capsules")]
        + [matrix.network.get_layer(n).router for n in ("conv_capsules1", "class_capsules")],
    }
    for model, layers in hinted.items():
        assert all(layer.xla is None for layer in layers)
        for xla in (True, False, None):
            set_xla(model, xla)
            assert [layer.xla for layer in layers] == [xla] * len(layers)
    # Only the layers that read the hint: not the models, not a decoder's
    # Dense, not Keras's own layers that have an `implementation`.
    assert not hasattr(matrix, "xla")
    assert not hasattr(capsnet.decoder.layers[0], "xla")
    cell = keras.layers.LSTMCell(2)
    set_xla(keras.Sequential([keras.layers.RNN(cell)]), True)
    assert not hasattr(cell, "xla")
    # A runtime hint: not in the config.
    assert "xla" not in matrix.network.get_layer("conv").get_config()


def test_the_hinted_layers_are_the_xla_hinted_ones():
    model = SegCaps((16, 16, 1), router=DynamicRouting(iterations=1))
    found = xla_hinted_layers(model)
    assert found and all(isinstance(layer, XlaHinted) for layer in found)
    kinds = {type(layer).__name__ for layer in found}
    assert {"AutoConv2D", "LocalCapsule2D", "LocalDeconvCapsule2D", "DynamicRouting"} <= kinds
    # A router without a hand-written backward reads no hint.
    images = keras.Input((12, 12, 3))
    capsules = Capsule(3, 4, router="sparse_attention")
    model = keras.Model(images, capsules(PrimaryCapsule(2, 4, 5, strides=2)(images)))
    assert capsules.router not in xla_hinted_layers(model)
    assert isinstance(AutoConv2D(2, 3), XlaHinted) and isinstance(SelfAttentionRouting(), XlaHinted)
