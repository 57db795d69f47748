"""Routing algorithms: each maps child votes to parent poses and activations.

Like `keras.initializers`, routers can be named: `get("dynamic")`,
`get({"class_name": "em", "config": {"iterations": 2}})` and `get(router)`
all give a `Router`, and every `router=` argument of the layers and models
goes through `get`.
"""

import importlib
import pkgutil

import keras

from keras_capsules.routing.base import Router
from keras_capsules.routing.registry import classes, names, router_class

# Every module of the package is imported, so each router module registers
# its class (`registry.register`); the registered classes are exported
# here and at the top level. A new router is its module: nothing else
# lists it.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
globals().update({cls.__name__: cls for cls in classes()})
__all__ = [
    "Router",
    *(cls.__name__ for cls in classes()),
    "classes",
    "clone",
    "deserialize",
    "get",
    "names",
    "router_class",
    "serialize",
]


def serialize(router):
    """A router's config dict: `keras.saving.serialize_keras_object(router)`.

    Args:
        router: a `Router`.

    Returns:
        a JSON-serialisable dict, for `deserialize`.

    Example:

    >>> config = keras_capsules.routing.serialize(
    ...     keras_capsules.routing.DynamicRouting(iterations=2))
    >>> config["registered_name"], config["config"]["iterations"]
    ('keras_capsules>DynamicRouting', 2)
    """
    return keras.saving.serialize_keras_object(router)


def deserialize(config, custom_objects=None):
    """The router of a config dict: one from `serialize`, or a short one,
    `{"class_name": "dynamic", "config": {...}}` (a name of `names()` or a
    router class name; `"config"` optional).

    Args:
        config: the dict.
        custom_objects: as for `keras.saving.deserialize_keras_object`.

    Returns:
        a new `Router`.

    Example:

    >>> router = keras_capsules.routing.deserialize(
    ...     {"class_name": "em", "config": {"iterations": 2}})
    >>> type(router).__name__, router.iterations
    ('EMRouting', 2)
    """
    class_name = config.get("class_name") if isinstance(config, dict) else None
    if (
        isinstance(class_name, str)
        and "registered_name" not in config
        and keras.saving.get_registered_object(class_name) is None
    ):
        return _construct(router_class(class_name), config.get("config") or {})
    return keras.saving.deserialize_keras_object(config, custom_objects=custom_objects)


def get(identifier):
    """A `Router` from a name, a config dict, a `Router` class or instance.

    - `None` -> `None` (the caller's default router);
    - a name (one of `names()`, or the class name) -> a new router with
      its default arguments;
    - a dict -> `deserialize(identifier)`;
    - a `Router` subclass -> a new instance; a `Router` -> itself.

    Raises a `ValueError` naming `router` for anything else.

    Args:
        identifier: the name, dict, class, instance or `None`.

    Returns:
        a `Router`, or `None`.

    Example:

    >>> type(keras_capsules.routing.get("em")).__name__
    'EMRouting'
    >>> layer = keras_capsules.layers.Capsule(10, 16, router="self_attention")
    >>> type(layer.router).__name__
    'SelfAttentionRouting'
    """
    if identifier is None:
        return None
    if isinstance(identifier, str):
        router = router_class(identifier)()
    elif isinstance(identifier, dict):
        router = deserialize(identifier)
    elif isinstance(identifier, type) and issubclass(identifier, Router):
        router = identifier()
    else:
        router = identifier
    if not isinstance(router, Router):
        raise ValueError(
            "`router` must be a router name, a router config dict or a "
            f"keras_capsules.routing.Router. Received: router={identifier!r}"
        )
    return router


def clone(router, **overrides):
    """A new, unbuilt router with the config of `router`.

    A router with weights is built for one size of votes, so each capsule
    layer needs its own; the ready models that take one `router=` for
    several layers give each layer a clone.

    Args:
        router: a router, or its name or config (as for `get`).
        **overrides: constructor arguments that replace the router's own
            (`iterations=2`, `dtype=...`); the clone gets a new name unless
            `name=` is given.

    Returns:
        a new `Router` of the same class.

    Example:

    >>> router = keras_capsules.routing.EMRouting(iterations=2)
    >>> copy = keras_capsules.routing.clone(router, epsilon=1e-3)
    >>> copy is router, copy.iterations, copy.epsilon
    (False, 2, 0.001)
    """
    router = get(router)
    if router is None:
        raise ValueError("`router` must be a router, its name or config. Received: router=None")
    # A new name too: each clone is a layer of its own.
    config = {k: v for k, v in router.get_config().items() if k != "name"}
    return _construct(type(router), {**config, **overrides})


def _construct(cls, config):
    """`cls(**config)`, the config's dtype policy deserialised: as
    `from_config`, but a bad argument raises the router's own `ValueError`
    (naming it), not Keras's `TypeError` that wraps it."""
    dtype = config.get("dtype")
    if isinstance(dtype, dict):
        dtype = keras.dtype_policies.deserialize(dtype)
    if type(dtype) is keras.dtype_policies.DTypePolicy:
        # By name, as `from_config` passes it: a router whose config is
        # Keras's automatic one serialises names, not policy objects.
        dtype = dtype.name
    return cls(**{**config, "dtype": dtype} if "dtype" in config else config)
