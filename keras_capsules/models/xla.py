"""XLA and the ready models: `compile` turns it on with TensorFlow on a CPU
too, and tells the layers that read the XLA hint whether it compiles them."""

import contextlib
import warnings

import keras

from keras_capsules.xla_hint import XlaHinted, cpu_only


def set_xla(model, xla):
    """Tells the layers and routers in `model` whether XLA compiles them.

    Sets the `xla` hint (`keras_capsules.xla_hint`) of every layer in
    `model` that reads it: the layers reached through `Model.layers`
    (nested models included) and each layer's `router`, that are
    `XlaHinted` (`AutoConv2D`, the primary capsules, SegCaps's capsule
    layers, the routers with hand-written backward passes). Their
    `implementation="auto"` (and the form of a router's backward pass)
    then picks what is fastest that way. A runtime setting, never saved;
    each of those layers starts with `xla=None` (unknown). The ready
    models' `compile` calls it; call it yourself when you compile a model
    of your own that holds such layers.

    Args:
        model: a model or layer.
        xla: `True` (XLA compiles the layers), `False` (it does not) or
            `None` (unknown).

    Example:

    >>> images = keras.Input((12, 12, 3))
    >>> primary = keras_capsules.layers.PrimaryCapsule(2, 4, 5, strides=2)
    >>> capsules = keras_capsules.layers.Capsule(3, 4, router="dynamic")
    >>> model = keras.Model(images, capsules(primary(images)))
    >>> keras_capsules.models.set_xla(model, False)
    >>> primary.xla, capsules.router.xla
    (False, False)
    """
    for layer in xla_hinted_layers(model):
        layer.xla = xla


def xla_hinted_layers(model):
    """The layers and routers of `model` (itself included) that read the XLA
    hint, as `set_xla` finds them."""
    found, seen = [], set()

    def visit(layer):
        if id(layer) in seen:
            return
        seen.add(id(layer))
        if isinstance(layer, XlaHinted):
            found.append(layer)
        router = getattr(layer, "router", None)
        if isinstance(router, keras.layers.Layer):
            visit(router)
        if isinstance(layer, keras.Model):
            for sublayer in layer.layers:
                visit(sublayer)

    visit(model)
    return found


def _in_tf_distribute_strategy():
    import tensorflow as tf

    return tf.distribute.has_strategy()


@contextlib.contextmanager
def xla_compile_kwargs(model, jit_compile, kwargs):
    """Yields `Model.compile`'s keyword arguments with `jit_compile` resolved.

    `jit_compile="auto"` compiles the train step with XLA on TensorFlow on
    CPU as well, where Keras's own `"auto"` leaves it off: the ready models
    train 1.2-1.7x faster with it, where the model says so
    (`CapsuleModel.xla_on_cpu`). Not when `run_eagerly`, nor under a
    `tf.distribute` strategy (Keras keeps XLA off there), nor where the
    model does not support XLA (then silently, as Keras's `"auto"`).
    Elsewhere `"auto"` is Keras's. After `compile`, every layer that reads
    the XLA hint is told whether XLA compiles it (`set_xla`).
    """
    backend = keras.backend.backend()
    forced = (
        jit_compile == "auto"
        and backend == "tensorflow"
        and model.xla_on_cpu
        and cpu_only()
        and not kwargs.get("run_eagerly")
        and not _in_tf_distribute_strategy()
    )
    with warnings.catch_warnings():
        if forced:
            warnings.filterwarnings("ignore", "Model doesn't support `jit_compile=True`")
        yield dict(kwargs, jit_compile=True if forced else jit_compile)
    if backend in ("tensorflow", "jax"):  # torch.compile is not XLA
        set_xla(model, bool(model.jit_compile))
