"""Shared test helpers and a project TestCase, on Keras's public API only.

Helpers: `to_numpy`, `gradients` (input gradients with the current
backend's autodiff; test-only code: the library never imports a backend,
tests may) and `jit_compile_for_backend` (the `jit_compile` choice).

`LayerTestCase.run_layer_test` runs the checks every public layer must pass
on the current backend: eager and symbolic (None batch) output shapes,
`compute_output_shape`, the number of trainable and non-trainable weights
and their dtype, registration, `get_config`/`from_config`, a `.keras`
save/load round trip with `safe_mode=True` and identical predictions, a
`train_on_batch` step (jit-compiled on TF and JAX) with finite loss and
weights, and the same under the mixed_float16 and mixed_bfloat16 policies
(half-precision outputs, float32 weights). `run_weight_arguments_test`
checks a layer's `kernel_*`/`bias_*` initializer, regularizer and
constraint arguments.

`ModelTestCase.run_model_test` runs the checks every ready model
(`keras_capsules.models.*`, a `CapsuleModel`) must pass on the current
backend: `compile()` with the model's defaults, `fit`, `evaluate` and
`predict`; a `.keras` round trip with `safe_mode=True` (same class, config,
weights and predictions, compiled again, one more `fit` step); the
mixed_float16 policy given as `dtype=` and as the global policy, in every
layer and router and through a `.keras` file. Export (SavedModel, ONNX,
LiteRT) of every ready model is tested in tests/test_export.py.
Helpers for it: `round_trip` (a `.keras` file, loaded with
`safe_mode=True`), `leaf_layers` and `forward` (a model's call, jitted on
JAX).
"""

import dataclasses
import json
import os
import tempfile
import warnings

import keras
import numpy as np

BACKEND = keras.backend.backend()
MIXED_POLICIES = ("mixed_float16", "mixed_bfloat16")


def jit_compile_for_backend(xla_on_tensorflow=True):
    """`jit_compile` as `model.fit` tests use it: XLA on TF and JAX.

    `xla_on_tensorflow=False`: JAX only, for models whose XLA compilation
    on TensorFlow costs tens of seconds to minutes and whose layers' XLA
    train steps the layer tests already run (JAX stays jitted: op by op
    it is slower than compiling)."""
    return BACKEND == "jax" or (xla_on_tensorflow and BACKEND == "tensorflow")


def to_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float64)


def gradients(loss_fn, tensors, diff):
    """Gradients of the scalar `loss_fn(tensors)` w.r.t. `tensors[k]`, k in diff.

    Unconnected inputs get zero gradients.
    """
    return _GRADS[BACKEND](loss_fn, dict(tensors), tuple(diff))


def _tf_grads(loss_fn, tensors, diff):
    import tensorflow as tf

    with tf.GradientTape() as tape:
        for k in diff:
            tape.watch(tensors[k])
        loss = loss_fn(tensors)
    grads = tape.gradient(loss, [tensors[k] for k in diff])
    return {k: tf.zeros_like(tensors[k]) if g is None else g for k, g in zip(diff, grads)}


def _torch_grads(loss_fn, tensors, diff):
    import torch

    for k in diff:
        tensors[k] = tensors[k].detach().clone().requires_grad_(True)
    loss = loss_fn(tensors)
    grads = torch.autograd.grad(loss, [tensors[k] for k in diff], allow_unused=True)
    return {
        k: torch.zeros_like(tensors[k]) if g is None else g.detach() for k, g in zip(diff, grads)
    }


def _jax_grads(loss_fn, tensors, diff):
    import jax

    def f(diff_values):
        return loss_fn({**tensors, **diff_values})

    # Jitted: one XLA program per call instead of one compile per primitive
    # and shape (timings: docs/testing.md).
    return jax.jit(jax.grad(f))({k: tensors[k] for k in diff})


_GRADS = {"tensorflow": _tf_grads, "torch": _torch_grads, "jax": _jax_grads}


def as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _shape_list(shapes):
    """A shape or a (nested) tuple of shapes -> list of tuples."""
    if isinstance(shapes, (list, tuple)) and shapes and isinstance(shapes[0], (list, tuple)):
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
        *,
        expected_num_trainable_weights,
        expected_num_non_trainable_weights,
    ):
        """`input_data`: an array or a list of arrays (the layer's inputs,
        passed as one list argument when there are several).
        `expected_output_shape`: a shape, or a tuple of shapes, with the
        batch size of `input_data`. `expected_num_*_weights`: counted on
        the built layer, its router's weights included, under every policy
        the test runs."""
        expected_counts = (expected_num_trainable_weights, expected_num_non_trainable_weights)
        call_kwargs = call_kwargs or {}
        inputs = as_list(input_data)
        multi_input = isinstance(input_data, (list, tuple))
        expected = _shape_list(expected_output_shape)

        # Eager call and compute_output_shape.
        layer = layer_cls(**init_kwargs)
        outputs = as_list(layer(input_data if multi_input else inputs[0], **call_kwargs))
        assert [tuple(o.shape) for o in outputs] == expected
        computed = _shape_list(
            layer.compute_output_shape(
                [x.shape for x in inputs] if multi_input else inputs[0].shape
            )
        )
        assert computed == expected, (computed, expected)
        _check_weights(layer, expected_counts)

        # Registration and config round trip.
        name = keras.saving.get_registered_name(layer_cls)
        assert name == f"keras_capsules>{layer_cls.__name__}", name
        config = layer.get_config()
        assert layer_cls.from_config(config).get_config() == config

        # Symbolic build with a None batch, then save / load.
        model, symbolic_layer = self._functional_model(
            layer_cls, init_kwargs, inputs, multi_input, call_kwargs
        )
        _check_weights(symbolic_layer, expected_counts)
        for out, shape in zip(as_list(model.outputs), expected):
            assert tuple(out.shape) == (None, *shape[1:]), (out.shape, shape)
        self._check_save_load(model, inputs)

        if run_training_check:
            self._check_train_step(model, inputs)
        if run_mixed_precision_check:
            for policy in MIXED_POLICIES:
                mixed, mixed_layer = self._functional_model(
                    layer_cls, {**init_kwargs, "dtype": policy}, inputs, multi_input, call_kwargs
                )
                assert mixed_layer.dtype_policy.name == policy, mixed_layer.dtype_policy
                _check_weights(mixed_layer, expected_counts)
                for p in as_list(mixed(inputs)):
                    assert keras.backend.standardize_dtype(p.dtype) == policy.split("_")[1]
                    p = keras.ops.convert_to_numpy(keras.ops.cast(p, "float32"))
                    assert np.all(np.isfinite(p)), policy
                if run_training_check:
                    # XLA is covered by the float32 step above, and
                    # compiling each policy again is slow on TF. Jitted on
                    # JAX: op-by-op dispatch compiles every op alone.
                    self._check_train_step(mixed, inputs, jit_compile=BACKEND == "jax")

    def run_weight_arguments_test(self, layer_cls, init_kwargs, input_data, weights):
        """The `<prefix>_initializer/_regularizer/_constraint` arguments.

        `weights`: `{prefix: names}`, the names of the weights that the
        `<prefix>_*` arguments govern (`{"kernel": ["kernel"], "bias":
        ["bias"]}`). Per prefix: the initializer makes those weights; the
        regularizer adds one loss per weight, of the right value; an
        optimizer step applies the constraint to those weights and no other;
        `get_config` keeps all three through `from_config`, and a config
        without the regularizer and constraint (older files) loads with
        none."""
        for prefix, names in weights.items():
            layer = layer_cls(
                **init_kwargs,
                **{
                    f"{prefix}_initializer": keras.initializers.RandomUniform(-1.0, 1.0, seed=1),
                    f"{prefix}_regularizer": keras.regularizers.L2(0.25),
                    f"{prefix}_constraint": keras.constraints.NonNeg(),
                },
            )
            # Built, not called: only the weights matter here.
            layer.build(
                [x.shape for x in input_data]
                if isinstance(input_data, (list, tuple))
                else input_data.shape
            )
            governed = sorted(w.path for w in layer.weights if w.name in names)
            assert len(governed) == len(names), ([w.path for w in layer.weights], names)
            before = {w.path: to_numpy(w.value) for w in layer.weights}
            assert all((before[path] < 0).any() for path in governed), "initializer not used"

            expected = sum(0.25 * np.sum(before[path] ** 2) for path in governed)
            assert len(layer.losses) == len(names), layer.losses
            np.testing.assert_allclose(sum(to_numpy(x) for x in layer.losses), expected, rtol=1e-5)

            # A step of rate 0: only the constraint changes the weights.
            variables = layer.trainable_weights
            keras.optimizers.SGD(0.0).apply(
                [keras.ops.zeros(v.shape) for v in variables], variables
            )
            for w in layer.weights:
                want = np.maximum(before[w.path], 0) if w.path in governed else before[w.path]
                np.testing.assert_array_equal(to_numpy(w.value), want, err_msg=w.path)

            config = layer.get_config()
            restored = layer_cls.from_config(config)
            assert restored.get_config() == config
            assert isinstance(getattr(restored, f"{prefix}_regularizer"), keras.regularizers.L2)
            assert isinstance(getattr(restored, f"{prefix}_constraint"), keras.constraints.NonNeg)
            for kind in ("regularizer", "constraint"):
                del config[f"{prefix}_{kind}"]
            older = layer_cls.from_config(config)
            assert getattr(older, f"{prefix}_regularizer") is None
            assert getattr(older, f"{prefix}_constraint") is None

    def _functional_model(self, layer_cls, init_kwargs, inputs, multi_input, call_kwargs):
        symbolic = [keras.Input(x.shape[1:], dtype=_dtype_of(x)) for x in inputs]
        layer = layer_cls(**init_kwargs)
        outputs = layer(symbolic if multi_input else symbolic[0], **call_kwargs)
        return keras.Model(symbolic, outputs), layer

    def _check_save_load(self, model, inputs):
        # Eager calls: a compiled predict per model would dominate test time.
        expected = [keras.ops.convert_to_numpy(o) for o in as_list(model(inputs))]
        loaded = round_trip(model)
        assert (len(loaded.trainable_weights), len(loaded.non_trainable_weights)) == (
            len(model.trainable_weights),
            len(model.non_trainable_weights),
        )
        actual = [keras.ops.convert_to_numpy(o) for o in as_list(loaded(inputs))]
        for a, e in zip(actual, expected):
            np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)

    def _check_train_step(self, model, inputs, jit_compile=None):
        batch = len(inputs[0])
        targets = [np.zeros((batch, *o.shape[1:]), "float32") for o in as_list(model.outputs)]
        model.compile(
            optimizer=keras.optimizers.SGD(0.01),
            loss=["mse"] * len(targets),
            jit_compile=jit_compile_for_backend() if jit_compile is None else jit_compile,
        )
        loss = model.train_on_batch(inputs, targets)
        assert np.all(np.isfinite(loss)), loss
        for w in model.weights:
            assert np.all(np.isfinite(keras.ops.convert_to_numpy(w.value).astype("float32"))), (
                w.path
            )


def _check_weights(layer, expected_counts):
    """Weight counts, and float32 weights: under the mixed policies only the
    computation runs in half precision (the variables, and so the optimizer
    updates, stay float32)."""
    counts = (len(layer.trainable_weights), len(layer.non_trainable_weights))
    assert counts == expected_counts, (
        f"{layer.name}: (trainable, non-trainable) weights {counts}, expected {expected_counts}: "
        f"{[w.path for w in layer.weights]}"
    )
    for w in layer.weights:
        assert keras.backend.standardize_dtype(w.dtype) == "float32", (w.path, w.dtype)


def _dtype_of(x):
    return "int32" if np.issubdtype(np.asarray(x).dtype, np.integer) else "float32"


def round_trip(model):
    """`model` through a `.keras` file, loaded with `safe_mode=True`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        return keras.saving.load_model(path, safe_mode=True)


def leaf_layers(model):
    """The layers under `model`, nested models opened, inputs left out; a
    layer's router follows the layer."""
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from leaf_layers(layer)
        elif not isinstance(layer, keras.layers.InputLayer):
            yield layer
            if isinstance(getattr(layer, "router", None), keras.layers.Layer):
                yield layer.router


@dataclasses.dataclass
class ModelRun:
    """What `ModelTestCase.run_model_test` leaves for a model's own checks.

    `model`: built, compiled with its defaults and fitted; `loaded`: `model`
    through a `.keras` file, then fitted one more step; `history`: the
    `fit` history of `model`; `predictions`: `model.predict(x)` after the
    fit; `loaded_predictions`: `loaded.predict(x)` before its step;
    `initial_weights`: `model.weights` as NumPy before the fit (read them
    with `initial(variable)`)."""

    model: keras.Model
    loaded: keras.Model
    history: dict
    predictions: np.ndarray
    loaded_predictions: np.ndarray
    initial_weights: list

    def initial(self, variable):
        """The value of `variable`, one of `model.weights`, before `fit`."""
        for weight, value in zip(self.model.weights, self.initial_weights):
            if weight is variable:
                return value
        raise ValueError(f"{variable.path} is not a weight of the model")


class ModelTestCase:
    def run_model_test(
        self,
        build,
        x,
        y,
        expected_output_shape,
        *,
        jit_compile=None,
        run_eagerly=False,
        batch_size=None,
        epochs=2,
        callbacks=None,
        same_outputs=None,
        random_outputs=False,
        run_mixed_precision_check=True,
    ):
        """The checks of a ready model (a `CapsuleModel`) on the current backend.

        1. `compile()` with the model's defaults (its `default_optimizer()`,
           `default_loss()` and `default_metrics()`), `fit(x, y)` for
           `epochs`: finite losses, the default metrics logged; `evaluate`:
           finite values; `predict(x)`: finite, of `expected_output_shape`.
        2. A `.keras` round trip with `safe_mode=True`: the same class,
           `get_config()` (a `backbone`'s left out: its config is Keras's
           own), every layer built, weights and predictions (`rtol=1e-5, atol=1e-6`), the same
           `same_outputs`; the loaded model comes back compiled (Keras
           skips models that override `compile` unless they implement
           `compile_from_config`) with the optimizer's state, and fits one
           more step.
        3. The mixed_float16 policy, given as `dtype=` and as the global
           policy: every leaf layer and router has it, the weights are
           float32, the outputs float16; the same through a `.keras` file
           loaded under the float32 global policy.

        Export of every ready model (SavedModel, ONNX, LiteRT, on every
        backend) is tested in tests/test_export.py, not here: it compiles
        an artifact per model and format.

        Args:
            build: `build(**kwargs) -> model`, a new model of tiny sizes;
                called with no argument, and with `dtype=` (3.).
            x: a batch of images.
            y: its labels (class ids; masks for a `CapsuleSegmenter`).
            expected_output_shape: the shape of `predict(x)`.
            jit_compile: `compile`'s; `None`: `jit_compile_for_backend()`.
                The loaded model keeps it (it is in the compile config).
            run_eagerly: `compile`'s.
            batch_size: of `fit`, `evaluate` and `predict` (default: all
                of `x` in one batch).
            epochs: of `fit`.
            callbacks: `fit`'s, or `callbacks(model) -> list`.
            same_outputs: `same_outputs(model) -> array or list`: more
                outputs the loaded model must reproduce
                (`lambda m: m.reconstruct(x, y)`).
            random_outputs: whether `predict` draws at random (an
                autoencoder's decoder grid): then only `same_outputs`
                (drawn the same way) are compared after loading.
            run_mixed_precision_check: whether to run 3.

        Returns:
            a `ModelRun`, for the model's own assertions.
        """
        batch_size = batch_size or len(x)
        keras.utils.set_random_seed(0)
        model = build()
        initial_weights = [to_numpy(w) for w in model.weights]
        model.compile(
            jit_compile=jit_compile_for_backend() if jit_compile is None else jit_compile,
            run_eagerly=run_eagerly,
        )
        _check_default_compile(model)
        if callable(callbacks):
            callbacks = callbacks(model)
        history = model.fit(
            x, y, batch_size=batch_size, epochs=epochs, callbacks=callbacks, verbose=0
        ).history
        assert len(history["loss"]) == epochs and np.all(np.isfinite(history["loss"])), history
        logs = {"loss", *(m if isinstance(m, str) else m.name for m in model.default_metrics())}
        assert logs <= set(history), (sorted(history), sorted(logs))
        results = model.evaluate(x, y, batch_size=batch_size, verbose=0, return_dict=True)
        assert logs <= set(results) and np.all(np.isfinite(list(results.values()))), results
        predictions = model.predict(x, batch_size=batch_size, verbose=0)
        assert predictions.shape == tuple(expected_output_shape), predictions.shape
        assert np.all(np.isfinite(predictions))

        loaded, loaded_predictions = self._check_keras_round_trip(
            model, x, y, None if random_outputs else predictions, batch_size, same_outputs
        )
        if run_mixed_precision_check:
            for given_as in ("argument", "global"):
                self._check_policy_round_trip(build, x[:2], given_as)
        return ModelRun(model, loaded, history, predictions, loaded_predictions, initial_weights)

    def _check_keras_round_trip(self, model, x, y, predictions, batch_size, same_outputs):
        expected = as_list(same_outputs(model)) if same_outputs else []
        with warnings.catch_warnings():
            warnings.filterwarnings("error", "`compile\\(\\)` was not called")
            loaded = round_trip(model)
        assert type(loaded) is type(model)
        assert _config_without_backbone(loaded) == _config_without_backbone(model)
        assert len(loaded.weights) == len(model.weights)
        for a, b in zip(loaded.weights, model.weights):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=b.path)
        # Built as loaded: Keras's JAX `predict` first runs a model with an
        # unbuilt layer eagerly, op by op, compiling every op.
        assert all(layer.built for layer in leaf_layers(loaded)), [
            layer.name for layer in leaf_layers(loaded) if not layer.built
        ]
        loaded_predictions = loaded.predict(x, batch_size=batch_size, verbose=0)
        if predictions is not None:
            np.testing.assert_allclose(loaded_predictions, predictions, rtol=1e-5, atol=1e-6)
        for a, e in zip(as_list(same_outputs(loaded)) if same_outputs else [], expected):
            np.testing.assert_allclose(to_numpy(a), to_numpy(e), rtol=1e-5, atol=1e-6)

        # Compiled as saved, the optimizer's state included: one more step.
        assert loaded.compiled and loaded.jit_compile == model.jit_compile
        assert type(loaded.optimizer) is type(model.optimizer)
        assert type(loaded.loss) is type(model.loss)
        steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        assert int(keras.ops.convert_to_numpy(loaded.optimizer.iterations)) == steps
        first = keras.tree.map_structure(lambda a: a[:batch_size], (x, y))
        step = loaded.fit(*first, batch_size=batch_size, verbose=0)
        assert np.all(np.isfinite(step.history["loss"])), step.history
        assert int(keras.ops.convert_to_numpy(loaded.optimizer.iterations)) == steps + 1
        return loaded, loaded_predictions

    def _check_policy_round_trip(self, build, images, given_as, policy="mixed_float16"):
        """A model made under `policy` (its `dtype=` argument, or the global
        policy) has it in every layer, and keeps it through a `.keras` file
        loaded under the float32 global policy."""
        if given_as == "argument":
            model = build(dtype=policy)
        else:
            keras.config.set_dtype_policy(policy)
            try:
                model = build()
            finally:
                keras.config.set_dtype_policy("float32")
        loaded = round_trip(model)
        outputs = []
        for m in (model, loaded):
            assert m.dtype_policy.name == policy, (given_as, m.dtype_policy)
            assert {layer.dtype_policy.name for layer in leaf_layers(m)} == {policy}, [
                (layer.name, layer.dtype_policy.name) for layer in leaf_layers(m)
            ]
            assert all(w.dtype == "float32" for w in m.weights)
            outputs.append(forward(m, images))
            assert keras.backend.standardize_dtype(outputs[-1].dtype) == "float16"
            assert np.all(np.isfinite(to_numpy(keras.ops.cast(outputs[-1], "float32")))), given_as
        assert _config_without_backbone(loaded) == _config_without_backbone(model)
        np.testing.assert_allclose(to_numpy(outputs[1]), to_numpy(outputs[0]), rtol=1e-3, atol=1e-3)


def forward(model, inputs, **kwargs):
    """`model(inputs, **kwargs)`; on JAX one jitted call, where an eager call
    compiles every op."""
    if BACKEND != "jax":
        return model(inputs, **kwargs)
    import jax

    def call(trainable, non_trainable, inputs):
        return model.stateless_call(trainable, non_trainable, inputs, **kwargs)[0]

    return jax.jit(call)(
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        inputs,
    )


def _check_default_compile(model):
    """`compile()` gave the model's defaults."""
    for compiled, default in (
        (model.optimizer, model.default_optimizer()),
        (model.loss, model.default_loss()),
    ):
        assert type(compiled) is type(default), (compiled, default)
        configs = [
            {k: v for k, v in obj.get_config().items() if k != "name"}
            for obj in (compiled, default)
        ]
        assert configs[0] == configs[1], configs


def _config_without_backbone(model):
    """A backbone's config is Keras's own (its input layer renamed on load);
    compared as in the file, JSON (a nested model's build shapes come back
    as lists)."""
    config = {k: v for k, v in model.get_config().items() if k != "backbone"}
    return json.loads(json.dumps(config))
