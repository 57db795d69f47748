"""The routers of the library, in one place: each router module registers
its class with `@register("name")` (or `@register()` for a router without a
short name), `keras_capsules.routing` imports every module of its package
and exports the registered classes (and the top level re-exports them), and
every `router=` of the layers and models (through `routing.get`) takes the
short names. A new router is its module: nothing else lists it."""

# short name -> router class, filled by the router modules as they import.
_ROUTERS = {}
# Every registered router class, named or not, in registration order.
_CLASSES = []


def register(name=None):
    """A class decorator that registers a router class: exported by
    `keras_capsules.routing` and the top level, and given a short name for
    `get` when `name` is given.

    A router module registers its class once, beside its Keras
    registration; `keras_capsules.routing` imports every module of its
    package, so the class and its name are there as soon as the module is.

    Args:
        name: the short name (`"dynamic"`, ...), not taken by another
            class; `None` for a router that is only given as an instance
            (its docstring says why).

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
        if name is not None:
            _ROUTERS[name] = cls
        if cls not in _CLASSES:
            _CLASSES.append(cls)
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


def classes():
    """Every registered router class, named or not, sorted by class name:
    what `keras_capsules.routing` and the top level export.

    Returns:
        a tuple of `Router` subclasses.

    Example:

    >>> from keras_capsules.routing.registry import classes
    >>> "QuaternionRouting" in [cls.__name__ for cls in classes()]
    True
    """
    return tuple(sorted(_CLASSES, key=lambda cls: cls.__name__))


def router_class(name):
    """The router class of a short name or a registered class name; a
    `ValueError` naming `router` and the valid names otherwise."""
    by_name = {**_ROUTERS, **{cls.__name__: cls for cls in _ROUTERS.values()}}
    if name not in by_name:
        raise ValueError(
            f"Unknown router name. Valid names: {', '.join(names())}. Received: router={name!r}"
        )
    return by_name[name]
