"""Every public ready model, tiny, with a batch it trains on: what the
model harness and the cross-backend resume test (tests/test_portability.py)
run for each. `tests/models/test_ready_models.py` fails when a public
model is missing here."""

import dataclasses
import importlib.util

import keras
import numpy as np

import keras_capsules as kc
from tests.models.builders import batch, tiny_capsnet, tiny_efficient, tiny_matrix_capsnet
from tests.models.test_point_capsnet import TINY as TINY_POINTS
from tests.models.test_point_capsnet import shapes

# The task bases: no model of their own, each run through a ready model.
TASK_BASES = (
    kc.models.CapsuleTask,
    kc.models.CapsuleModel,
    kc.models.CapsuleClassifier,
    kc.models.CapsuleSegmenter,
)
ONE_DYNAMIC_ITERATION = {"class_name": "dynamic", "config": {"iterations": 1}}
LENGTH = 8


@dataclasses.dataclass(frozen=True)
class ReadyModel:
    """`build(**kwargs)` a tiny model (`dtype=` passes through); `data()`
    -> `(x, y, expected predict shape)`; `needs`: a module it needs."""

    build: object
    data: object
    needs: str = None

    def available(self):
        return self.needs is None or importlib.util.find_spec(self.needs) is not None


def _points(classes=3):
    clouds, labels = shapes(8, points=32)
    return clouds, labels % classes


def _autoencoded(clouds):
    """An autoencoder's batch: the clouds are the labels too."""
    return clouds, clouds, (len(clouds), TINY_POINTS["num_points"], 3)


def _point_capsnet(**kwargs):
    # Seeded: the decoder draws its grid at every call.
    return kc.models.PointCapsNet(**TINY_POINTS, router=ONE_DYNAMIC_ITERATION, seed=0, **kwargs)


def point_classifier(head):
    def build(**kwargs):
        autoencoder = _point_capsnet(dtype=kwargs.get("dtype"))
        router = {} if head == "linear" else {"router": ONE_DYNAMIC_ITERATION}
        return kc.models.PointCapsuleClassifier(autoencoder, 3, head=head, **router, **kwargs)

    return build


def _quaternion_classifier(**kwargs):
    return kc.models.QuaternionCapsuleClassifier(
        3,
        primary_capsules=2,
        num_patches=8,
        patch_size=4,
        frame_neighbors=8,
        router=kc.QuaternionRouting(1),
        **kwargs,
    )


def _sequence_classifier(**kwargs):
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=12, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=LENGTH,
    )  # fmt: skip
    return kc.models.CapsuleSequenceClassifier(
        backbone, 2, hidden_dim=8, num_parts=4, part_dim=4, capsule_dim=4, iterations=1, **kwargs
    )


def _tokens():
    tokens = np.random.default_rng(0).integers(3, 10, size=(8, LENGTH)).astype("int32")
    x = {"token_ids": tokens, "segment_ids": np.zeros_like(tokens), "padding_mask": tokens > 0}
    return x, ((tokens < 6).sum(axis=1) >= 4).astype("int32")


def _image_classifier(**kwargs):
    backbone = keras.Sequential(
        [keras.Input((12, 12, 3)), keras.layers.Conv2D(6, 3, strides=2, dtype=kwargs.get("dtype"))]
    )
    return kc.models.CapsuleImageClassifier(
        backbone, 3, primary_capsules=2, primary_dim=4, capsule_dim=4, decoder_units=(8,),
        router=ONE_DYNAMIC_ITERATION, **kwargs,
    )  # fmt: skip


def _segcaps(**kwargs):
    return kc.models.SegCaps((16, 16, 1), router=ONE_DYNAMIC_ITERATION, **kwargs)


def _masks():
    images, _ = batch((16, 16, 1))
    return images, (images > 0.5).astype("float32")[..., 0], (8, 16, 16, 1)


def _heinsen(**kwargs):
    return kc.models.HeinsenCapsNet(
        (32, 32, 2), 3, num_parts=4, channels=8,
        router={"class_name": "heinsen", "config": {"iterations": 1}}, **kwargs,
    )  # fmt: skip


def _with_shape(data, shape):
    return lambda: (*data(), shape)


READY_MODELS = {
    "CapsNet": ReadyModel(tiny_capsnet, _with_shape(lambda: batch((20, 20, 1)), (8, 3))),
    "EfficientCapsNet": ReadyModel(tiny_efficient, _with_shape(lambda: batch((16, 16, 1)), (8, 3))),
    "MatrixCapsNet": ReadyModel(
        tiny_matrix_capsnet, _with_shape(lambda: batch((32, 32, 2), classes=5), (8, 5))
    ),
    "HeinsenCapsNet": ReadyModel(_heinsen, _with_shape(lambda: batch((32, 32, 2)), (8, 3))),
    "CapsuleImageClassifier": ReadyModel(
        _image_classifier, _with_shape(lambda: batch((12, 12, 3)), (8, 3))
    ),
    "SegCaps": ReadyModel(_segcaps, _masks),
    "PointCapsNet": ReadyModel(_point_capsnet, lambda: _autoencoded(_points()[0])),
    "PointCapsuleClassifier": ReadyModel(
        point_classifier("capsules"), _with_shape(_points, (8, 3))
    ),
    "QuaternionCapsuleClassifier": ReadyModel(_quaternion_classifier, _with_shape(_points, (8, 3))),
    "CapsuleSequenceClassifier": ReadyModel(
        _sequence_classifier, _with_shape(_tokens, (8, 2)), needs="keras_hub"
    ),
}
