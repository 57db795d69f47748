"""CapsuleSegmenter, the base of SegCaps: masks as labels (class maps
included), the default loss and metrics, on the tiny subclass of its
docstring. SegCaps itself, with the model harness: tests/models/test_segcaps.py."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from tests.test_case import jit_compile_for_backend, to_numpy


class TinySegmenter(kc.models.CapsuleSegmenter):
    """One capsule type of 4D per pixel, scored by its length."""

    def __init__(self, num_classes=1, **kwargs):
        super().__init__((8, 8, 1), num_classes, **kwargs)
        images = keras.Input(self.image_shape)
        poses = keras.layers.Conv2D(4 * num_classes, 3, padding="same")(images)
        poses = keras.layers.Reshape((8, 8, num_classes, 4))(poses)
        self.encoder = keras.Model(images, poses)
        self.lengths = kc.Length()

    def scores_and_poses(self, images, training=None):
        poses = self.encoder(images, training=training)
        return self.lengths(poses), poses


def test_fits_on_masks_with_the_defaults():
    model = TinySegmenter(positive_weight=2.0)
    model.compile(jit_compile=jit_compile_for_backend())
    assert isinstance(model.loss, kc.losses.WeightedBinaryCrossentropy)
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(4, 8, 8, 1)).astype("float32")
    for masks in ((images > 0.5).astype("float32"), (images[..., 0] > 0.5).astype("int32")):
        history = model.fit(images, masks, batch_size=4, verbose=0).history
        assert set(history) == {"loss", "dice", "iou"}
        assert all(np.isfinite(v[0]) for v in history.values()), history
    scores = model.predict(images, verbose=0)
    assert scores.shape == (4, 8, 8, 1) and np.all(np.isfinite(scores))


def test_integer_class_maps_are_masks():
    model = TinySegmenter(num_classes=2)
    ids = np.array([[[0, 1], [2, 1]]])
    masks = to_numpy(model.targets(ids))
    np.testing.assert_array_equal(masks[0, 1, 0], [0, 1])
    np.testing.assert_array_equal(masks[0, 0, 0], [0, 0])
    np.testing.assert_array_equal(masks[0, 0, 1], [1, 0])


def test_masks_of_another_shape_are_named():
    model = TinySegmenter(num_classes=2)
    model.compile()
    images = np.zeros((2, 8, 8, 1), "float32")
    with pytest.raises(ValueError, match=r"\(batch, 8, 8, 2\).*Received: y.shape=\(2, 8, 8, 1\)"):
        model.fit(images, np.zeros((2, 8, 8, 1)), verbose=0)
    with pytest.raises(ValueError, match=r"Received: validation_data labels.shape=\(2, 4, 4\)"):
        model.fit(
            images, np.zeros((2, 8, 8)), validation_data=(images, np.zeros((2, 4, 4))), verbose=0
        )
