"""`compile` of the ready models: XLA on TensorFlow's CPU too, and the layers told."""

import contextlib
import warnings

import keras

from keras_capsules.conv import cpu_only, set_xla


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
    Elsewhere `"auto"` is Keras's. After `compile`, every convolving layer
    of this library is told whether XLA compiles it
    (`keras_capsules.conv.set_xla`), so `"auto"` picks the convolution
    that is fastest that way.
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
