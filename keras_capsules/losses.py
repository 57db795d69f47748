"""Losses for capsule networks."""

import keras
from keras import ops

from keras_capsules.validation import one_of


@keras.saving.register_keras_serializable(package="keras_capsules")
class MarginLoss(keras.losses.Loss):
    """Margin loss of Sabour et al. (2017), eq. 4.

    For one-hot labels `T` and capsule lengths `|v|`, per class:

    ```
    L_k = T_k * relu(m_plus - |v_k|)^2
          + down_weight * (1 - T_k) * relu(|v_k| - m_minus)^2
    ```

    summed (`class_reduction="sum"`, the paper) or averaged (`"mean"`) over
    classes, then reduced over the batch by the usual Keras `reduction`.
    Computed in float32 under mixed precision.

    Args:
        m_plus: lower margin for the true class.
        m_minus: upper margin for the other classes.
        down_weight: weight of the absent-class term (lambda in the paper).
        class_reduction: `"sum"` or `"mean"` over classes.

    Example:

    >>> loss = keras_capsules.losses.MarginLoss()
    >>> model.compile(optimizer="adam", loss=loss)  # y_pred: capsule lengths

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017.
    """

    def __init__(
        self,
        m_plus=0.9,
        m_minus=0.1,
        down_weight=0.5,
        class_reduction="sum",
        name="margin_loss",
        reduction="sum_over_batch_size",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.m_plus = float(m_plus)
        self.m_minus = float(m_minus)
        self.down_weight = float(down_weight)
        self.class_reduction = one_of(class_reduction, ("sum", "mean"), "class_reduction")

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "float32")
        lengths = ops.cast(y_pred, "float32")
        present = y_true * ops.square(ops.relu(self.m_plus - lengths))
        absent = (1.0 - y_true) * ops.square(ops.relu(lengths - self.m_minus))
        per_class = present + self.down_weight * absent
        if self.class_reduction == "sum":
            return ops.sum(per_class, axis=-1)
        return ops.mean(per_class, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(
            m_plus=self.m_plus,
            m_minus=self.m_minus,
            down_weight=self.down_weight,
            class_reduction=self.class_reduction,
        )
        return config
