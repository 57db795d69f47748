"""One contract for every ready model: each public model is a
`CapsuleTask`, has a tiny entry in tests/models/ready_models.py (the
cross-backend resume test, tests/test_portability.py, runs them all) and
runs the model harness (`ModelTestCase.run_model_test`: fit, save, load,
fit again, predict equal, every layer built, mixed precision): here for
the models that have no harness test in their own file."""

import json
import pathlib
import zipfile

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.models.builders import tiny_efficient
from tests.models.ready_models import READY_MODELS, TASK_BASES
from tests.test_case import BACKEND, ModelTestCase

HERE = pathlib.Path(__file__).resolve().parent
# Run below; the others' own test files run the harness with their checks.
HARNESS_HERE = (
    "PointCapsNet",
    "PointCapsuleClassifier",
    "QuaternionCapsuleClassifier",
    "CapsuleSequenceClassifier",
)


def public_models():
    return {
        name: obj
        for name, obj in vars(kc.models).items()
        if isinstance(obj, type) and issubclass(obj, keras.Model)
    }


def test_every_public_model_is_a_task_with_a_harness_entry():
    models = public_models()
    assert all(issubclass(m, kc.models.CapsuleTask) for m in models.values()), models
    ready = {name for name, m in models.items() if m not in TASK_BASES}
    assert ready == set(READY_MODELS), sorted(ready ^ set(READY_MODELS))
    assert set(public_models()) <= set(dir(kc)), "every model at the top level"


@pytest.mark.parametrize("name", sorted(set(READY_MODELS) - set(HARNESS_HERE)))
def test_the_others_run_the_harness_in_their_own_test_file(name):
    module = getattr(kc.models, name).__module__.rsplit(".", 1)[-1]
    source = (HERE / f"test_{module}.py").read_text()
    assert "run_model_test(" in source, f"tests/models/test_{module}.py"


class TestReadyModels(ModelTestCase):
    @pytest.mark.parametrize("name", HARNESS_HERE)
    def test_model_harness(self, name):
        ready = READY_MODELS[name]
        if not ready.available():
            pytest.skip(f"needs {ready.needs}")
        x, y, shape = ready.data()
        same_outputs = None
        if name == "PointCapsNet":  # The decoder draws its grid: fix it.
            grid = np.random.default_rng(0).uniform(size=(8, 8, 4, 2)).astype("float32")

            def same_outputs(model):
                return model.decode(model.encode(x), grid=grid)

        run = self.run_model_test(
            ready.build,
            x,
            y,
            shape,
            batch_size=4,
            same_outputs=same_outputs,
            random_outputs=name == "PointCapsNet",
            # The backbone keeps its own policy (float32): not the head's.
            run_mixed_precision_check=name != "CapsuleSequenceClassifier",
        )
        assert np.all(np.isfinite(run.history["loss"]))


# Clouds of any number of points through one exported signature, (None,
# None, 3): SavedModel from TensorFlow and JAX. Not the quaternion
# classifier from JAX: its neighbourhoods' top_k needs a known number of
# points there (export it with a fixed one, `input_signature=`).
POINT_MODELS = ("PointCapsuleClassifier", "QuaternionCapsuleClassifier")


@pytest.mark.parametrize("name", POINT_MODELS)
def test_point_cloud_models_export_for_any_number_of_points(name, tmp_path):
    if BACKEND not in ("tensorflow", "jax"):
        pytest.skip(f"SavedModel export from TensorFlow and JAX; {BACKEND} exports ONNX")
    if BACKEND == "jax" and name == "QuaternionCapsuleClassifier":
        pytest.skip("jax: top_k needs a known number of points (a fixed input_signature)")
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = READY_MODELS[name].build()
    model.export(str(tmp_path / name), format="tf_saved_model", verbose=False)
    served = tf.saved_model.load(str(tmp_path / name))
    rng = np.random.default_rng(0)
    for points in (16, 24):
        clouds = rng.normal(size=(3, points, 3)).astype("float32")
        expected = keras.ops.convert_to_numpy(model(clouds, training=False))
        np.testing.assert_allclose(
            served.serve(tf.constant(clouds)).numpy(), expected, rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize("jit_compile", ["auto", False])
def test_a_saved_model_keeps_the_jit_compile_given(jit_compile, tmp_path):
    # Keras saves the value this backend resolved "auto" to (True on JAX,
    # and on TensorFlow on CPU for the models with xla_on_cpu): loaded on
    # torch, such a file compiled with torch.compile, minutes before its
    # first predict. The ready models save the choice as given, resolved
    # again by the backend that loads the file.
    keras.utils.set_random_seed(0)
    model = tiny_efficient()
    model.compile(jit_compile=jit_compile)
    assert model.get_compile_config()["jit_compile"] == jit_compile
    model.optimizer.build(model.trainable_variables)
    path = tmp_path / "model.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        saved = json.loads(archive.read("config.json"))["compile_config"]
    assert saved["jit_compile"] == jit_compile
    loaded = keras.saving.load_model(path)
    assert loaded.jit_compile == model.jit_compile  # resolved here, as compiled here
    assert loaded.get_compile_config()["jit_compile"] == jit_compile
    if BACKEND == "torch":
        assert loaded.jit_compile is False  # no torch.compile for "auto"
