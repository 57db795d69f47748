"""Export for serving: each format Keras can write on this backend exports the
capsule models, and the format's own runtime (TensorFlow, ONNX Runtime, the
LiteRT interpreter) serves the class scores that Keras predicts.

The (backend, format) pairs that Keras itself cannot export are skipped with
the reason; docs/export.md has the same table.
"""

import functools
import importlib.util

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.conftest import BACKEND

# (backend, format) -> why Keras 3.15 cannot export the pair.
UNSUPPORTED = {
    ("torch", "tf_saved_model"): (
        "Keras exports torch models to a SavedModel through torch_xla, whose "
        "wheels are built for one torch release (torch-xla 2.9 on torch 2.13: "
        "undefined symbol in _XLAC.so); with a dynamic batch, "
        "keras/src/backend/torch/export.py also passes torch.export "
        "dynamic_shapes that do not match Layer.forward(*args)"
    ),
    ("jax", "litert"): "Keras: LiteRT export requires TensorFlow or PyTorch backend",
}
if importlib.util.find_spec("litert_torch") is None:
    UNSUPPORTED[("torch", "litert")] = (
        "Keras converts torch models to LiteRT with the litert-torch package "
        "(pip install litert-torch), which the test extras leave out: it "
        "brings transformers and torchao and pins typing-extensions < 4.13"
    )
# (backend, format, model) -> (exception, message) that the export or the
# runtime raises today: strict expected failures of library code, to drop
# when the library avoids them.
KNOWN_FAILURES = {}
FORMATS = ("tf_saved_model", "onnx", "litert")
FILENAMES = {"tf_saved_model": "saved_model", "onnx": "model.onnx", "litert": "model.tflite"}

ROUTERS = {
    "dynamic": lambda: kc.routing.DynamicRouting(iterations=2),
    "em": lambda: kc.routing.EMRouting(iterations=2),
    "self-attention": lambda: kc.routing.SelfAttentionRouting(),
    "sparse-attention": lambda: kc.routing.SparseAttentionRouting(),
    "inverted-dot-product": lambda: kc.routing.InvertedDotProductRouting(),
    "self-routing": lambda: kc.routing.SelfRouting(),
}


# Routers that fail some export on this backend get a model of their own.
ALONE = sorted(
    {
        name[len("router-") :]
        for backend, _, name in KNOWN_FAILURES
        if backend == BACKEND and name.startswith("router-")
    }
)
TOGETHER = [name for name in ROUTERS if name not in ALONE]


def routers_model(names):
    """Conv2D -> PrimaryCapsule -> Capsule(router) -> Length for each router
    side by side: `(batch, routers, classes)` scores, one export for all."""
    images = keras.Input((8, 8, 1))
    x = keras.layers.Conv2D(4, 3, activation="relu")(images)
    x = kc.PrimaryCapsule(2, 4, 3, strides=2)(x)
    scores = [kc.Length()(kc.Capsule(3, 4, router=ROUTERS[n]())(x)) for n in names]
    return keras.Model(images, keras.ops.stack(scores, axis=1))


# The sizes of tests/models/builders.py and test_matrix_capsnet.py, so JAX
# finds their initializers in its compilation cache.
MODELS = {
    "CapsNet": lambda: kc.CapsNet(
        (20, 20, 1),
        3,
        conv_filters=8,
        primary_capsules=2,
        primary_dim=4,
        capsule_dim=4,
        decoder_units=(8,),
    ),
    "EfficientCapsNet": lambda: kc.EfficientCapsNet((16, 16, 1), 3, decoder_units=(8,)),
    "MatrixCapsNet": lambda: kc.MatrixCapsNet(
        conv_filters=4,
        primary_capsules=2,
        conv_capsules1=2,
        conv_capsules2=2,
        router={"class_name": "em", "config": {"iterations": 1}},
    ),
    "SegCaps": lambda: kc.SegCaps(
        (16, 16, 1), router={"class_name": "dynamic", "config": {"iterations": 1}}
    ),
    "routers": lambda: routers_model(TOGETHER),
    **{f"router-{name}": (lambda name=name: routers_model([name])) for name in ALONE},
}


@functools.cache
def built(name):
    """`(model, images, Keras scores)`, built once for all formats."""
    keras.utils.set_random_seed(0)
    model = MODELS[name]()
    shape = getattr(model, "image_shape", None) or tuple(model.inputs[0].shape[1:])
    # 3 images: a batch size that no exporter traced with.
    images = np.random.default_rng(0).uniform(size=(3, *shape)).astype("float32")
    return model, images, keras.ops.convert_to_numpy(model(images, training=False))


def export_kwargs(fmt, images):
    if BACKEND == "torch" and fmt == "litert":
        # Keras: torch -> LiteRT has static shapes only (a None batch becomes 1).
        return {"input_signature": [keras.InputSpec(shape=images.shape, dtype="float32")]}
    return {}


def skip_unsupported(fmt):
    reason = UNSUPPORTED.get((BACKEND, fmt))
    if reason:
        pytest.skip(f"{BACKEND} -> {fmt}: {reason}")


def serve(fmt, path, images, endpoint="serve"):
    """Runs the exported artifact with the format's own runtime; a list of outputs."""
    if fmt == "tf_saved_model":
        import tensorflow as tf

        artifact = tf.saved_model.load(path)  # Kept: its variables live with it.
        outputs = getattr(artifact, endpoint)(tf.constant(images))
        return [np.asarray(o) for o in tf.nest.flatten(outputs)]
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        return session.run(None, {session.get_inputs()[0].name: images})
    if fmt == "litert":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=path)
        index = interpreter.get_input_details()[0]["index"]
        # TensorFlow's files have batch -1 in the signature and 1 in the tensor.
        interpreter.resize_tensor_input(index, images.shape)
        interpreter.allocate_tensors()
        interpreter.set_tensor(index, images)
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    raise ValueError(fmt)


def assert_serves(served, expected, names=None):
    """Within 1e-5 relative to the largest output (scores of an untrained
    capsule net span ~1e-4 .. 1; a plain rtol would judge the smallest by
    float32 round-off). `names`: one per output."""
    assert len(served) == len(expected), (len(served), len(expected))
    for i, (got, want) in enumerate(zip(served, expected)):
        want = np.asarray(want)
        assert got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_allclose(
            got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=names[i] if names else ""
        )


# JAX converts a model for export by tracing it (jax2tf, jax2onnx), slowly
# for these models (the windowed ones most; timings: docs/testing.md). They are exported from
# TensorFlow and torch; the routers and CapsNet from JAX too.
EXPORTED_ON_TF_AND_TORCH_ONLY = {"MatrixCapsNet", "SegCaps", "EfficientCapsNet"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_serves_keras_scores(fmt, tmp_path, subtests):
    """One test per format, one subtest per model: an exporter's set-up
    (TensorFlow tracing, jax2onnx loading its plugins: ~20 s) is paid once
    per process, and pytest-xdist would spread parametrized cases over
    processes."""
    skip_unsupported(fmt)
    for name in MODELS:
        if BACKEND == "jax" and name in EXPORTED_ON_TF_AND_TORCH_ONLY:
            continue
        with subtests.test(msg=name):
            model, images, expected = built(name)
            path = str(tmp_path / f"{name}-{FILENAMES[fmt]}")
            if (BACKEND, fmt, name) in KNOWN_FAILURES:
                error, message = KNOWN_FAILURES[BACKEND, fmt, name]
                with pytest.raises(error, match=message):
                    model.export(path, format=fmt, verbose=False, **export_kwargs(fmt, images))
                    serve(fmt, path, images)
                continue
            model.export(path, format=fmt, verbose=False, **export_kwargs(fmt, images))
            (served,) = serve(fmt, path, images)
            if name.startswith("router"):  # One comparison per router, named.
                names = TOGETHER if name == "routers" else [name[len("router-") :]]
                assert served.shape == expected.shape, (served.shape, expected.shape)
                assert_serves(
                    list(np.moveaxis(served, 1, 0)), list(np.moveaxis(expected, 1, 0)), names=names
                )
            else:
                assert_serves([served], [expected])


def test_known_failures_name_real_cases():
    formats, models = set(FORMATS), set(MODELS) | {f"router-{n}" for n in ROUTERS}
    assert all(f in formats and m in models for _, f, m in KNOWN_FAILURES)


def scores_and_poses(model):
    """The recipe of docs/export.md: a functional model that
    serves `[scores, poses]` with `model`'s layers and weights."""
    images = keras.Input(model.image_shape)
    if isinstance(model, kc.MatrixCapsNet):
        poses, scores = model.encode(images)
    else:
        poses = model.encode(images)
        scores = kc.Length()(poses)
    return keras.Model(images, [scores, poses])


@pytest.mark.skipif(
    BACKEND == "jax",
    reason="JAX's ONNX export of these models: test_export_serves_keras_scores[onnx]; the "
    "recipe's functional model is backend code, checked on TensorFlow and torch",
)
@pytest.mark.parametrize("name", ["CapsNet", "MatrixCapsNet"])
def test_onnx_serves_scores_and_poses(name, tmp_path):
    model, images, scores = built(name)
    serving = scores_and_poses(model)
    expected = [keras.ops.convert_to_numpy(t) for t in serving(images)]
    assert_serves([expected[0]], [scores])  # The same scores as `model`.
    path = str(tmp_path / "model.onnx")
    serving.export(path, format="onnx", verbose=False)
    assert_serves(serve("onnx", path, images), expected, names=["scores", "poses"])


def test_saved_model_poses_endpoint(tmp_path):
    """The other recipe: a second SavedModel endpoint with keras.export.ExportArchive."""
    if BACKEND != "tensorflow":
        # torch: Keras's ExportArchive has no `track` / `add_endpoint` there.
        # JAX: it works (jax2tf), but adds a slow trace to this file's time.
        pytest.skip("the ExportArchive recipe is tested on TensorFlow")
    model, images, scores = built("CapsNet")
    spec = [keras.InputSpec(shape=(None, *model.image_shape), dtype="float32")]
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", lambda x: model(x, training=False), input_signature=spec)
    archive.add_endpoint("poses", lambda x: model.encode(x, training=False), input_signature=spec)
    path = str(tmp_path / "saved_model")
    archive.write_out(path, verbose=False)
    poses = keras.ops.convert_to_numpy(model.encode(images, training=False))
    assert_serves(serve("tf_saved_model", path, images), [scores])
    assert_serves(serve("tf_saved_model", path, images, endpoint="poses"), [poses])


def test_ready_model_exports_after_predict_alone(tmp_path):
    # On JAX, predict makes no eager call, from which Keras would infer a
    # subclassed model's input signature; the ready models give theirs.
    fmt = next(f for f in FORMATS if (BACKEND, f) not in UNSUPPORTED)
    keras.utils.set_random_seed(0)
    model = MODELS["CapsNet"]()
    images = np.random.default_rng(1).uniform(size=(3, *model.image_shape)).astype("float32")
    scores = model.predict(images, verbose=0)
    path = str(tmp_path / FILENAMES[fmt])
    model.export(path, format=fmt, verbose=False)
    assert_serves(serve(fmt, path, images), [scores])
