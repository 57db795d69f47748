"""The router names: each router module registers its class under a short
name with `@register("name")`, and every `router=` of the layers and models
(through `routing.get`) takes those names."""

# short name -> router class, filled by the router modules as they import.
_ROUTERS = {}


def register(name):
    """A class decorator that gives a router class a short name for `get`.

    A router module registers its class once, beside its Keras
    registration; importing the module (as `keras_capsules.routing` does)
    makes the name valid for every `router=`.

    Args:
        name: the short name (`"dynamic"`, ...), not taken by another class.

    Returns:
        the decorator, which returns the class unchanged.

    In a router module:

    ```python
    @keras.saving.register_keras_serializable(package="keras_capsules")
    @register("uniform")
    class UniformRouting(Router): ...
    ```

    Example (the names the library's routers registered):

    >>> from keras_capsules.routing.registry import router_class
    >>> router_class("dynamic").__name__, router_class("DynamicRouting").__name__
    ('DynamicRouting', 'DynamicRouting')
    """

    def decorator(cls):
        taken = _ROUTERS.get(name)
        if taken is not None and taken is not cls:
            raise ValueError(
                f"The router name {name!r} is taken by {taken.__name__}. "
                f"Received: name={name!r} for {cls.__name__}"
            )
        _ROUTERS[name] = cls
        return cls

    return decorator


def names():
    """The router names `get` accepts, sorted.

    Returns:
        a tuple of names (`get` also takes the class names).

    Example:

    >>> keras_capsules.routing.names()[:3]
    ('cross_attention', 'dynamic', 'em')
    """
    return tuple(sorted(_ROUTERS))


def router_class(name):
    """The router class of a short name or a registered class name; a
    `ValueError` naming `router` and the valid names otherwise."""
    by_name = {**_ROUTERS, **{cls.__name__: cls for cls in _ROUTERS.values()}}
    if name not in by_name:
        raise ValueError(
            f"Unknown router name. Valid names: {', '.join(names())}. Received: router={name!r}"
        )
    return by_name[name]
