"""Capsule segmenters: per-pixel scores out, masks as labels."""

import keras
from keras import ops

from keras_capsules.losses import WeightedBinaryCrossentropy
from keras_capsules.metrics import DiceCoefficient
from keras_capsules.models.capsule_model import CapsuleModel
from keras_capsules.validation import positive_float


class CapsuleSegmenter(CapsuleModel):
    """Base of the capsule segmenters: a score per pixel and class.

    The contract of `keras_capsules.models.CapsuleModel` with masks for
    labels: `model(images)`, `predict` and `export` give per-pixel scores
    `(batch, H, W, num_classes)` in [0, 1]; `model(images,
    return_poses=True)` gives `(scores, poses)`, the per-pixel capsules'
    poses too; `fit(images, masks)` trains.

    - Masks: `(batch, H, W, num_classes)` (or `(batch, H, W)` with one
      class) of 0/1 values; with several classes also an integer map
      `(batch, H, W)` of 0 (background) to `num_classes` (class `k` ->
      mask `k - 1`). `targets(masks)` gives the float32 masks the loss and
      metrics take; `fit` and `evaluate` refuse array masks of another
      shape (`check_targets`).
    - `compile(loss="auto", metrics="auto")`:
      `WeightedBinaryCrossentropy(positive_weight)` and the metrics
      `DiceCoefficient()` (`"dice"`) and the foreground's
      `keras.metrics.BinaryIoU` (`"iou"`).

    Subclasses implement `scores_and_poses(images, training)` (and may add
    a loss term with `extra_loss`, as `SegCaps` adds its reconstruction).

    Args:
        input_shape: image shape `(H, W, channels)`.
        num_classes: foreground classes, one score per pixel each.
        positive_weight: the weight of foreground pixels in the default
            loss (background pixels / foreground pixels of the training
            set balances them), `> 0`.
        **kwargs: `keras.Model` arguments (`name`, `dtype`, ...).

    Call arguments:
        images: `(batch, H, W, channels)`.
        training: whether the layers run in training mode.
        return_poses: `True` for `(scores, poses)`.

    Returns:
        per-pixel scores `(batch, H, W, num_classes)`, or `(scores, poses)`.

    Example (a segmenter of one capsule type per pixel, scored by length):

    >>> class TinySegmenter(keras_capsules.models.CapsuleSegmenter):
    ...     def __init__(self, **kwargs):
    ...         super().__init__((8, 8, 1), **kwargs)
    ...         images = keras.Input(self.image_shape)
    ...         poses = keras.layers.Reshape((8, 8, 1, 4))(keras.layers.Conv2D(4, 3,
    ...             padding="same")(images))
    ...         self.encoder = keras.Model(images, poses)
    ...         self.lengths = keras_capsules.layers.Length()
    ...     def scores_and_poses(self, images, training=None):
    ...         poses = self.encoder(images, training=training)
    ...         return self.lengths(poses), poses
    >>> model = TinySegmenter()
    >>> model.compile()
    >>> images, masks = np.zeros((2, 8, 8, 1)), np.zeros((2, 8, 8))
    >>> history = model.fit(images, masks, verbose=0)
    >>> tuple(model.predict(images, verbose=0).shape)
    (2, 8, 8, 1)

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation", 2018
    (arXiv:1804.04241): capsule lengths as per-pixel scores.
    """

    def __init__(self, input_shape, num_classes=1, positive_weight=1.0, **kwargs):
        super().__init__(input_shape, num_classes, **kwargs)
        self.positive_weight = positive_float(positive_weight, "positive_weight")

    def targets(self, y):
        """The masks `y` as float32 `(batch, H, W, num_classes)`."""
        y = ops.convert_to_tensor(y)
        if len(y.shape) == 3:
            if self.num_classes == 1:
                return ops.cast(y, "float32")[..., None]
            ids = ops.cast(y, "int32")
            return ops.one_hot(ids, self.num_classes + 1, dtype="float32")[..., 1:]
        return ops.cast(y, "float32")

    def check_targets(self, y, name):
        """Raises a `ValueError` naming `name` for array masks `y` whose
        shape is neither `(batch, H, W, num_classes)` nor `(batch, H, W)`;
        masks from a dataset or generator are checked by the loss."""
        if y is None or not hasattr(y, "shape") or not hasattr(y, "ndim"):
            return
        height, width = self.image_shape[:2]
        shape = tuple(y.shape)
        ok = shape[1:3] == (height, width) and (
            len(shape) == 3 or (len(shape) == 4 and shape[3] == self.num_classes)
        )
        if not ok:
            raise ValueError(
                f"{type(self).__name__} expects masks of shape (batch, {height}, {width}, "
                f"{self.num_classes}) or (batch, {height}, {width}). "
                f"Received: {name}.shape={shape}"
            )

    def default_loss(self):
        """`WeightedBinaryCrossentropy(positive_weight)` on the scores."""
        return WeightedBinaryCrossentropy(self.positive_weight)

    def default_metrics(self):
        """`DiceCoefficient()` (`"dice"`) and the foreground's `BinaryIoU` (`"iou"`)."""
        return [
            DiceCoefficient(name="dice"),
            keras.metrics.BinaryIoU(target_class_ids=(1,), threshold=0.5, name="iou"),
        ]

    def get_config(self):
        config = super().get_config()  # name, trainable, dtype, input_shape, num_classes
        config.update(positive_weight=self.positive_weight)
        return config
