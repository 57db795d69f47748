"""A project TestCase built on Keras's public API only.

`LayerTestCase.run_layer_test` runs the checks every public layer must pass
on the current backend: eager and symbolic (None batch) output shapes,
`compute_output_shape`, registration, `get_config`/`from_config`, a `.keras`
save/load round trip with `safe_mode=True` and identical predictions, a
`train_on_batch` step (jit-compiled on TF and JAX) with finite loss and
weights, and the same under the mixed_float16 and mixed_bfloat16 policies.
"""

import os
import tempfile

import keras
import numpy as np

from tests.conftest import jit_compile_for_backend

MIXED_POLICIES = ("mixed_float16", "mixed_bfloat16")


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _shape_list(shapes):
    """A shape or a (nested) tuple of shapes -> list of tuples."""
    if isinstance(shapes, (list, tuple)) and shapes and isinstance(
        shapes[0], (list, tuple)
    ):
        return [tuple(s) for s in shapes]
    return [tuple(shapes)]


class LayerTestCase:
    def run_layer_test(
        self,
        layer_cls,
        init_kwargs,
        input_data,
        expected_output_shape,
        call_kwargs=None,
        run_training_check=True,
        run_mixed_precision_check=True,
    ):
        """`input_data`: an array or a list of arrays (the layer's inputs,
        passed as one list argument when there are several).
        `expected_output_shape`: a shape, or a tuple of shapes, with the
        batch size of `input_data`."""
        call_kwargs = call_kwargs or {}
        inputs = _as_list(input_data)
        multi_input = isinstance(input_data, (list, tuple))
        expected = _shape_list(expected_output_shape)

        # Eager call and compute_output_shape.
        layer = layer_cls(**init_kwargs)
        outputs = _as_list(layer(input_data if multi_input else inputs[0], **call_kwargs))
        assert [tuple(o.shape) for o in outputs] == expected
        computed = _shape_list(
            layer.compute_output_shape(
                [x.shape for x in inputs] if multi_input else inputs[0].shape
            )
        )
        assert computed == expected, (computed, expected)

        # Registration and config round trip.
        name = keras.saving.get_registered_name(layer_cls)
        assert name == f"keras_capsules>{layer_cls.__name__}", name
        config = layer.get_config()
        assert layer_cls.from_config(config).get_config() == config

        # Symbolic build with a None batch, then save / load.
        model = self._functional_model(layer_cls, init_kwargs, inputs, multi_input, call_kwargs)
        for out, shape in zip(_as_list(model.outputs), expected):
            assert tuple(out.shape) == (None, *shape[1:]), (out.shape, shape)
        self._check_save_load(model, inputs)

        if run_training_check:
            self._check_train_step(model, inputs)
        if run_mixed_precision_check:
            for policy in MIXED_POLICIES:
                mixed = self._functional_model(
                    layer_cls, {**init_kwargs, "dtype": policy}, inputs, multi_input, call_kwargs
                )
                for p in _as_list(mixed(inputs)):
                    assert keras.backend.standardize_dtype(p.dtype) == policy.split("_")[1]
                    p = keras.ops.convert_to_numpy(keras.ops.cast(p, "float32"))
                    assert np.all(np.isfinite(p)), policy
                if run_training_check:
                    # XLA is covered by the float32 step above; compiling
                    # each policy again costs ~10 s per layer on TF.
                    self._check_train_step(mixed, inputs, jit_compile=False)

    def _functional_model(self, layer_cls, init_kwargs, inputs, multi_input, call_kwargs):
        symbolic = [keras.Input(x.shape[1:], dtype=_dtype_of(x)) for x in inputs]
        layer = layer_cls(**init_kwargs)
        outputs = layer(symbolic if multi_input else symbolic[0], **call_kwargs)
        return keras.Model(symbolic, outputs)

    def _check_save_load(self, model, inputs):
        # Eager calls: a compiled predict per model would dominate test time.
        expected = [keras.ops.convert_to_numpy(o) for o in _as_list(model(inputs))]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.keras")
            model.save(path)
            loaded = keras.saving.load_model(path, safe_mode=True)
        actual = [keras.ops.convert_to_numpy(o) for o in _as_list(loaded(inputs))]
        for a, e in zip(actual, expected):
            np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)

    def _check_train_step(self, model, inputs, jit_compile=None):
        batch = len(inputs[0])
        targets = [np.zeros((batch, *o.shape[1:]), "float32") for o in _as_list(model.outputs)]
        model.compile(
            optimizer=keras.optimizers.SGD(0.01),
            loss=["mse"] * len(targets),
            jit_compile=jit_compile_for_backend() if jit_compile is None else jit_compile,
        )
        loss = model.train_on_batch(inputs, targets)
        assert np.all(np.isfinite(loss)), loss
        for w in model.weights:
            assert np.all(np.isfinite(keras.ops.convert_to_numpy(w.value).astype("float32"))), w.path


def _dtype_of(x):
    return "int32" if np.issubdtype(np.asarray(x).dtype, np.integer) else "float32"
