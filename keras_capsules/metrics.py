"""Metrics of capsule classifiers."""

import keras
from keras import ops

from keras_capsules.validation import positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class LabelSetAccuracy(keras.metrics.MeanMetricWrapper):
    """Share of images whose `k` longest capsules are exactly their `k` classes.

    For images that hold `k` objects of distinct classes (MultiMNIST: two
    overlapping digits), an image counts as correct when the set of its
    `k` highest scores is the set of its labelled classes:

    ```
    correct = all_i [score_i >= kth_largest(score)] == [i labelled]
    ```

    With `k = 1` this is plain accuracy (ties aside). Its error is the
    MultiMNIST error of Sabour et al. 2017.

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

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (section 6).
    """

    def __init__(self, k=2, name="label_set_accuracy", dtype=None):
        self.k = positive_int(k, "k")
        super().__init__(fn=label_set_correct, name=name, dtype=dtype, k=self.k)

    def get_config(self):
        return {"k": self.k, "name": self.name, "dtype": self.dtype}


def label_set_correct(y_true, y_pred, k=2):
    """1.0 per image whose `k` highest scores are its `k` labelled classes."""
    scores = ops.cast(y_pred, "float32")
    kth = ops.top_k(scores, k)[0][:, k - 1 :]
    predicted = ops.cast(scores >= kth, "float32")
    return ops.cast(ops.all(predicted == ops.cast(y_true, "float32"), axis=-1), "float32")
