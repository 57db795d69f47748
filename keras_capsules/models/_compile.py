"""`compile` of the ready models: XLA on TensorFlow's CPU too, and the layers told."""

import warnings

import keras

from keras_capsules.conv import cpu_only, set_xla


class AutoXLACompile:
    """Mixin of the ready models (before `keras.Model` in the bases).

    `compile(jit_compile="auto")` (the default) compiles the train step
    with XLA on TensorFlow on CPU as well, where Keras's own `"auto"`
    leaves it off: these models train 1.2-1.7x faster with it. Not when
    `run_eagerly`, nor under a `tf.distribute` strategy (Keras keeps XLA
    off there), nor where the model does not support XLA. Elsewhere
    `"auto"` is Keras's. Then every layer with an `implementation` is told
    whether XLA compiles it (`keras_capsules.conv.set_xla`), so `"auto"`
    picks the convolution that is fastest that way.
    """

    def compile(self, *args, jit_compile="auto", **kwargs):
        backend = keras.backend.backend()
        if (jit_compile == "auto" and backend == "tensorflow" and cpu_only()
                and not kwargs.get("run_eagerly")
                and getattr(self, "_distribute_strategy", None) is None):
            # As Keras's "auto": no XLA, silently, where the model cannot have it.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Model doesn't support `jit_compile=True`")
                super().compile(*args, jit_compile=True, **kwargs)
        else:
            super().compile(*args, jit_compile=jit_compile, **kwargs)
        if backend in ("tensorflow", "jax"):  # torch.compile is not XLA
            set_xla(self, bool(self.jit_compile))

    def compile_from_config(self, config):
        # Keras's own, which skips models that override `compile`: a loaded
        # `.keras` file comes back compiled, through the `compile` above.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(self.trainable_variables)  # its variables, to load
