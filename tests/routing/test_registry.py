"""keras_capsules.routing.get / serialize / deserialize, and `router=` by name."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules import routing

NAMES = {
    "cross_attention": kc.CrossAttentionRouting,
    "dynamic": kc.DynamicRouting,
    "em": kc.EMRouting,
    "heinsen": kc.HeinsenRouting,
    "self_attention": kc.SelfAttentionRouting,
    "sparse_attention": kc.SparseAttentionRouting,
    "inverted_dot_product": kc.InvertedDotProductRouting,
    "self_routing": kc.SelfRouting,
}


def test_names_list_every_router():
    assert routing.names() == tuple(sorted(NAMES))


@pytest.mark.parametrize("name", sorted(NAMES))
def test_get_by_name_and_class_name(name):
    assert type(routing.get(name)) is NAMES[name]
    assert type(routing.get(NAMES[name].__name__)) is NAMES[name]
    assert type(routing.get(NAMES[name])) is NAMES[name]


def test_get_instances_none_and_configs():
    router = kc.DynamicRouting(iterations=2, agreement="cosine")
    assert routing.get(router) is router
    assert routing.get(None) is None
    restored = routing.get(routing.serialize(router))
    assert type(restored) is kc.DynamicRouting and restored is not router
    assert (restored.iterations, restored.agreement) == (2, "cosine")
    assert routing.deserialize(routing.serialize(router)).get_config() == router.get_config()
    short = routing.get({"class_name": "em", "config": {"iterations": 1}})
    assert type(short) is kc.EMRouting and short.iterations == 1
    assert type(routing.get({"class_name": "self_routing"})) is kc.SelfRouting


@pytest.mark.parametrize(
    "identifier, message",
    [
        ("dynamo", "router='dynamo'"),
        ({"class_name": "dynamo"}, "router='dynamo'"),
        (3, "router=3"),
        (keras.layers.Dense(2), "router=<Dense"),
    ],
)
def test_bad_identifiers_name_router(identifier, message):
    with pytest.raises(ValueError, match=message) as info:
        routing.get(identifier)
    if isinstance(identifier, (str, dict)):
        assert "inverted_dot_product" in str(info.value)  # lists the valid names


def test_capsule_takes_a_name():
    layer = kc.Capsule(10, 16, router="dynamic")
    assert type(layer.router) is kc.DynamicRouting
    assert layer(keras.Input((32, 8))).shape == (None, 10, 16)


def test_a_named_router_gets_the_layer_dtype_policy():
    # As the default router does: float64 layers route in float64.
    for router in (None, "sparse_attention"):
        layer = kc.Capsule(3, 4, router=router, dtype="float64")
        assert layer.router.dtype_policy.name == "float64"
    layer = kc.Capsule(3, 4, router="dynamic", dtype="mixed_bfloat16")
    assert layer.router.dtype_policy.name == "mixed_bfloat16"


LAYERS = {
    "Capsule": lambda r: kc.Capsule(3, 4, router=r),
    "ConvCapsule1D": lambda r: kc.ConvCapsule1D(2, 4, router=r),
    "ConvCapsule2D": lambda r: kc.ConvCapsule2D(2, 4, router=r),
    "ConvMatrixCapsule": lambda r: kc.ConvMatrixCapsule(2, router=r),
    "ClassMatrixCapsule": lambda r: kc.ClassMatrixCapsule(2, router=r),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layer_router_names_round_trip(layer):
    layer = LAYERS[layer]("self_routing")
    config = layer.get_config()
    assert "build_config" not in config["router"]  # the layer builds its router
    assert type(layer.__class__.from_config(config).router) is kc.SelfRouting


def test_model_router_names_round_trip():
    models = [
        kc.CapsNet(
            (20, 20, 1),
            3,
            conv_filters=4,
            primary_capsules=2,
            primary_dim=4,
            capsule_dim=4,
            decoder_units=(8,),
            router="self_attention",
        ),
        kc.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,), router="dynamic"),
        kc.MatrixCapsNet(
            conv_filters=4, primary_capsules=2, conv_capsules1=2, conv_capsules2=2, router="dynamic"
        ),
    ]
    for model in models:
        restored = model.__class__.from_config(model.get_config())
        if isinstance(model, kc.MatrixCapsNet):
            routers = [
                restored.network.get_layer(n).router
                for n in ("conv_capsules1", "conv_capsules2", "class_capsules")
            ]
        else:
            routers = [model.digit_capsules.router, restored.digit_capsules.router]
        expected = kc.SelfAttentionRouting if isinstance(model, kc.CapsNet) else kc.DynamicRouting
        assert all(type(r) is expected for r in routers)


def test_a_router_config_holds_no_build_config():
    # The layer that owns a router builds it (Router.get_build_config).
    layer = kc.Capsule(3, 4, router=kc.SelfRouting())
    layer.build((None, 5, 4))
    assert layer.router.built
    assert "build_config" not in keras.saving.serialize_keras_object(layer.router)
    restored = kc.Capsule.from_config(layer.get_config())
    assert restored(np.ones((2, 5, 4), "float32")).shape == (2, 3, 4)
    assert len(restored.weights) == len(layer.weights)


def test_clone_is_a_new_unbuilt_router_with_the_same_config():
    router = kc.EMRouting(iterations=2)
    router.build((None, 6, 3, 16), (None, 6))
    copy = routing.clone(router, epsilon=1e-3)
    assert type(copy) is kc.EMRouting and not copy.built
    assert (copy.iterations, copy.epsilon) == (2, 1e-3)
    assert copy.name != router.name
    assert routing.clone("dynamic").iterations == 3
    with pytest.raises(ValueError, match="Received: router=None"):
        routing.clone(None)
