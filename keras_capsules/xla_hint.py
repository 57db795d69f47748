"""Whether XLA compiles a layer: the hint that some layers' fastest form reads.

A layer cannot see whether XLA compiles it, yet the fastest way to compute
some of them depends on it (a strided convolution's form on TensorFlow's
CPU; the form of a router's hand-written backward pass). Such a layer or
router subclasses `XlaHinted`: it then has an `xla` attribute, `None`
(unknown) until whoever compiles the model sets it to `True` or `False`
(`keras_capsules.models.set_xla`, which the ready models' `compile` calls).
A runtime hint: it changes speed only, never the values, and is never saved.

Example:

>>> from keras_capsules.xla_hint import XlaHinted, xla_compiles
>>> isinstance(keras_capsules.layers.AutoConv2D(4, 3), XlaHinted)
True
>>> xla_compiles(True) == (keras.backend.backend() != "torch")  # torch runs no XLA
True
"""

import keras


class XlaHinted:
    """Mixin of the layers and routers whose fastest form depends on XLA.

    Attributes:
        xla: whether XLA compiles the layer: `None` (unknown, the default),
            `True` or `False`. Set by `keras_capsules.models.set_xla` (the
            ready models' `compile` calls it) or by hand; a runtime setting,
            not saved in the config.
    """

    xla = None


def cpu_only():
    """Whether every device Keras sees is a CPU (`keras.distribution.list_devices()`)."""
    return all(d.lower().startswith("cpu") for d in keras.distribution.list_devices())


def xla_compiles(xla):
    """Whether XLA compiles a layer whose hint is `xla`: always on JAX, never
    on torch, on TensorFlow as the hint says, else as Keras's
    `jit_compile="auto"` decides (XLA on a GPU, a graph without XLA on a
    CPU).

    Args:
        xla: the layer's `xla` hint: `True`, `False` or `None`.

    Returns:
        a bool.
    """
    backend = keras.backend.backend()
    if backend != "tensorflow":
        return backend == "jax"
    return not cpu_only() if xla is None else bool(xla)
