"""Metrics of capsule classifiers and segmenters."""

import keras
from keras import ops

from keras_capsules.validation import finite_float, positive_float, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class LabelSetAccuracy(keras.metrics.MeanMetricWrapper):
    """Share of images whose `k` longest capsules are exactly their `k` classes.

    For images that hold `k` objects of distinct classes (MultiMNIST: two
    overlapping digits), an image counts as correct when the set of its
    `k` highest scores is the set of its labelled classes:

    ```
    correct = [sum_i y_i = k] and min_{i: y_i = 1} score_i > max_{j: y_j = 0} score_j
    ```

    that is, every labelled class scores strictly higher than every other
    class. A tie between a labelled class and another one leaves the top
    `k` undecided and counts as wrong, on every backend alike. With `k = 1`
    this is plain accuracy (ties counted wrong). Its error is the
    MultiMNIST error of Sabour et al. 2017.

    It is for images that all hold exactly `k` labels: an image with fewer
    or more is never counted correct, however its scores tie. For a
    number of labels that varies from image to image (0 to 3 objects, say)
    use `ExactSetAccuracy`, which thresholds the scores instead. Scores
    are compared in their own float dtype (float64 scores are not rounded
    to float32 first).

    Args:
        k: labels per image, `>= 1`.
        name: the metric's name.
        dtype: the metric's dtype.

    Call arguments (`update_state`):
        y_true: k-hot labels `(batch, num_classes)`.
        y_pred: class scores `(batch, num_classes)`.

    Example:

    >>> metric = keras_capsules.metrics.LabelSetAccuracy(2)
    >>> metric.update_state(np.array([[1, 1, 0], [1, 0, 1]]),
    ...                     np.array([[0.9, 0.8, 0.1], [0.9, 0.8, 0.1]]))
    >>> float(metric.result())
    0.5

    Images with other than two labels are wrong, even when scores tie:

    >>> metric = keras_capsules.metrics.LabelSetAccuracy(2)
    >>> metric.update_state(np.array([[1, 1, 0], [1, 1, 1], [0, 0, 0]]),
    ...                     np.array([[0.9, 0.8, 0.1], [0.9, 0.9, 0.9], [0.5, 0.5, 0.5]]))
    >>> round(float(metric.result()), 4)
    0.3333

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (section 6).
    """

    def __init__(self, k=2, name="label_set_accuracy", dtype=None):
        self.k = positive_int(k, "k")
        super().__init__(fn=label_set_correct, name=name, dtype=dtype, k=self.k)

    def get_config(self):
        return {"k": self.k, "name": self.name, "dtype": self.dtype}


def _float_scores(y_pred):
    """`y_pred` as a float tensor: float inputs keep their dtype (float64
    stays float64), others become float32."""
    scores = ops.convert_to_tensor(y_pred)
    if "float" not in keras.backend.standardize_dtype(scores.dtype):
        scores = ops.cast(scores, "float32")
    return scores


def label_set_correct(y_true, y_pred, k=2):
    """1.0 per image that holds exactly `k` labels, each scoring strictly
    higher than every unlabelled class; 0.0 otherwise (ties included)."""
    scores = _float_scores(y_pred)
    labelled = ops.cast(y_true, "float32") > 0.5
    # The lowest labelled score and the highest other one: no sentinel
    # value, so any finite scores of either dtype compare exactly.
    lowest = ops.min(ops.where(labelled, scores, ops.max(scores, axis=-1, keepdims=True)), axis=-1)
    highest = ops.max(ops.where(labelled, ops.min(scores, axis=-1, keepdims=True), scores), axis=-1)
    count = ops.sum(ops.cast(labelled, "int32"), axis=-1)
    separated = ops.logical_or(lowest > highest, count == ops.shape(scores)[-1])
    return ops.cast(ops.logical_and(count == k, separated), "float32")


@keras.saving.register_keras_serializable(package="keras_capsules")
class ExactSetAccuracy(keras.metrics.MeanMetricWrapper):
    """Share of images whose predicted label set is exactly their label set.

    For multi-label images with any number of labels (none included): the
    predicted set is the classes whose score (capsule length) is above
    `threshold`, the true set the classes whose target is above 0.5:

    ```
    correct = all_i [score_i > threshold] == [y_i > 0.5]
    ```

    An image with no label is correct when no score passes the threshold.
    Per-label figures come with Keras: `keras.metrics.BinaryAccuracy(
    threshold=0.5)` (the share of correct class decisions) and
    `keras.metrics.F1Score(average="macro", threshold=0.5)`.

    Args:
        threshold: the score above which a class is predicted, in [0, 1).
        name: the metric's name.
        dtype: the metric's dtype.

    Call arguments (`update_state`):
        y_true: k-hot labels `(batch, num_classes)` (any `k` per image;
            `keras_capsules.labels.multi_hot` makes them from class ids
            padded with -1).
        y_pred: class scores `(batch, num_classes)`.
        sample_weight: optional `(batch,)` weights.

    Example (three images: two labels, none, one):

    >>> metric = keras_capsules.metrics.ExactSetAccuracy()
    >>> metric.update_state(np.array([[1, 1, 0], [0, 0, 0], [0, 0, 1]]),
    ...                     np.array([[0.9, 0.8, 0.1], [0.2, 0.1, 0.3], [0.9, 0.1, 0.7]]))
    >>> round(float(metric.result()), 4)
    0.6667

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (capsule lengths as independent class probabilities).
    """

    def __init__(self, threshold=0.5, name="exact_set_accuracy", dtype=None):
        self.threshold = finite_float(threshold, "threshold", 0.0, 1.0, True, False)
        super().__init__(fn=exact_set_correct, name=name, dtype=dtype, threshold=self.threshold)

    def get_config(self):
        return {"threshold": self.threshold, "name": self.name, "dtype": self.dtype}


def exact_set_correct(y_true, y_pred, threshold=0.5):
    """1.0 per image whose classes scored above `threshold` are exactly
    its labelled classes (targets above 0.5)."""
    scores = _float_scores(y_pred)
    predicted = scores > threshold
    labelled = ops.cast(y_true, "float32") > 0.5
    return ops.cast(ops.all(predicted == labelled, axis=-1), "float32")


@keras.saving.register_keras_serializable(package="keras_capsules")
class DiceCoefficient(keras.metrics.MeanMetricWrapper):
    """Mean Dice coefficient of thresholded segmentation masks.

    The scores `p` and the masks `y` are thresholded (`P = p > threshold`,
    `Y = y > threshold`); per image and class, with counts over the
    pixels (all axes between the batch and class axes):

    ```
    dice_k = (2 * |P & Y| + smooth) / (|P| + |Y| + smooth)
    ```

    The value of one image is the mean of `dice_k` over its classes, and
    the metric the mean over the images seen (weighted by
    `sample_weight`). An empty prediction of an empty mask scores 1.

    Args:
        threshold: pixels with a score above it are foreground,
            `0 <= threshold < 1`.
        smooth: added to the numerator and the denominator, `> 0`.
        name: the metric's name.
        dtype: the metric's dtype.

    Call arguments (`update_state`):
        y_true: masks in {0, 1}, `(batch, height, width, classes)` (or
            `(batch, ..., classes)` with any number of spatial axes).
        y_pred: foreground scores (capsule lengths), of the shape of
            `y_true`.
        sample_weight: optional `(batch,)` weights, one per image.

    Returns:
        `result()`: the mean Dice coefficient, a scalar in [0, 1].

    Example:

    >>> metric = keras_capsules.metrics.DiceCoefficient()
    >>> y_true = np.array([[[[1.0], [1.0], [0.0]]]])  # one 1 x 3 image
    >>> y_pred = np.array([[[[0.9], [0.2], [0.7]]]])  # |P & Y| = 1
    >>> metric.update_state(y_true, y_pred)
    >>> # (2 * 1) / (2 + 2)
    >>> round(float(metric.result()), 4)
    0.5

    Reference: Dice, "Measures of the Amount of Ecologic Association
    Between Species", Ecology 26(3), 1945; LaLonde & Bagci, "Capsules
    for Object Segmentation", arXiv:1804.04241, 2018.
    """

    def __init__(self, threshold=0.5, smooth=1e-5, name="dice", dtype=None):
        self.threshold = finite_float(threshold, "threshold", 0.0, 1.0, True, False)
        self.smooth = positive_float(smooth, "smooth")
        super().__init__(
            fn=dice_coefficient,
            name=name,
            dtype=dtype,
            threshold=self.threshold,
            smooth=self.smooth,
        )

    def get_config(self):
        return {
            "threshold": self.threshold,
            "smooth": self.smooth,
            "name": self.name,
            "dtype": self.dtype,
        }


def dice_coefficient(y_true, y_pred, threshold=0.5, smooth=1e-5):
    """Dice coefficient of `y_pred > threshold` and `y_true > threshold`,
    per image: the mean over classes of `(2 |P & Y| + smooth) / (|P| +
    |Y| + smooth)`, counts over the axes between batch and classes.

    Args:
        y_true: masks `(batch, ..., classes)`, at least one spatial axis.
        y_pred: scores of the same shape.
        threshold: the foreground threshold of both.
        smooth: added to the numerator and the denominator.

    Returns:
        `(batch,)` float32 values in [0, 1].
    """
    scores = ops.cast(y_pred, "float32")
    if len(scores.shape) < 3:
        raise ValueError(
            "`dice_coefficient` expects scores of shape (batch, ..., classes) with at "
            "least one spatial axis, such as (batch, height, width, classes). "
            f"Received: y_pred.shape={tuple(scores.shape)}"
        )
    predicted = ops.cast(scores > threshold, "float32")
    target = ops.cast(ops.cast(y_true, "float32") > threshold, "float32")
    axes = tuple(range(1, len(predicted.shape) - 1))
    overlap = ops.sum(predicted * target, axis=axes)
    total = ops.sum(predicted, axis=axes) + ops.sum(target, axis=axes)
    return ops.mean((2.0 * overlap + smooth) / (total + smooth), axis=-1)
