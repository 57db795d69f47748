"""keras_capsules.routing.get / serialize / deserialize, and `router=` by name.

The registry is the one list of router names (each router module registers
its own): the tests iterate `routing.names()`, and the routers' tables in
the docs are checked against it."""

import pathlib
import re

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules import routing
from keras_capsules.routing import registry

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Routers without a short name, on purpose (their docstrings say why).
UNNAMED = {kc.QuaternionRouting}


def test_names_are_sorted_and_every_exported_router_has_one():
    names = routing.names()
    assert names == tuple(sorted(names)) and len(set(names)) == len(names)
    exported = {
        obj
        for obj in vars(routing).values()
        if isinstance(obj, type) and issubclass(obj, routing.Router) and obj is not routing.Router
    }
    assert {type(routing.get(n)) for n in names} == exported - UNNAMED


@pytest.mark.parametrize("name", routing.names())
def test_get_by_name_and_class_name(name):
    cls = type(routing.get(name))
    assert getattr(routing, cls.__name__) is cls and getattr(kc, cls.__name__) is cls
    assert type(routing.get(cls.__name__)) is cls
    assert type(routing.get(cls)) is cls


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="taken by DynamicRouting"):
        registry.register("dynamic")(kc.EMRouting)
    assert registry.register("dynamic")(kc.DynamicRouting) is kc.DynamicRouting
    assert type(routing.get("dynamic")) is kc.DynamicRouting


def test_get_docstring_does_not_list_the_names_by_hand():
    # A hand list goes stale when a router is added; it points to `names()`.
    doc = routing.get.__doc__
    assert "names()" in doc
    prose = [line for line in doc.splitlines() if not line.strip().startswith((">>>", "..."))]
    assert not [n for n in routing.names() if any(f'"{n}"' in line for line in prose)]


def _documented_names(page, pattern):
    return sorted(re.findall(pattern, (ROOT / page).read_text(), re.M))


@pytest.mark.parametrize(
    "page, pattern",
    [
        ("docs/routing.md", r'^\| `"(\w+)"` \| `\w+Routing` \|'),  # "Choosing a router"
        ("docs/api.md", r'^\| `routing\.\w+Routing`, `"(\w+)"` \|'),
        ("README.md", r'^\| `"(\w+)"` \| `\w+Routing` \|'),  # "Routers"
    ],
)
def test_the_docs_tables_list_every_registered_router(page, pattern):
    # Every registered router documented, no stale row.
    assert _documented_names(page, pattern) == sorted(routing.names())


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
        assert ", ".join(routing.names()) in str(info.value)  # lists the valid names


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
            routers = [model.class_capsules.router, restored.class_capsules.router]
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


def test_every_router_class_of_the_package_is_registered_and_exported():
    # `keras_capsules.routing` imports every module of its package: a router
    # module needs only `@register`, and one that forgets it fails here.
    import importlib
    import inspect
    import pkgutil

    defined = set()
    for module in pkgutil.iter_modules(routing.__path__):
        namespace = importlib.import_module(f"keras_capsules.routing.{module.name}")
        defined |= {
            obj
            for obj in vars(namespace).values()
            if inspect.isclass(obj)
            and issubclass(obj, routing.Router)
            and obj is not routing.Router
            and obj.__module__ == namespace.__name__
        }
    assert set(registry.classes()) == defined
    for cls in defined:
        assert getattr(routing, cls.__name__) is cls and getattr(kc, cls.__name__) is cls
        assert cls.__name__ in routing.__all__
