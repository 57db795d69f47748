"""Losses for capsule networks."""

import keras
from keras import ops

from keras_capsules.labels import one_hot
from keras_capsules.validation import (
    boolean,
    finite_float,
    non_negative_float,
    one_of,
    positive_float,
    positive_int,
)


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
        m_plus: lower margin for the true class, `0 < m_plus <= 1`
            (capsule lengths lie in [0, 1)).
        m_minus: upper margin for the other classes, `0 <= m_minus <
            m_plus`.
        down_weight: weight of the absent-class term (lambda in the
            paper), `>= 0`.
        class_reduction: `"sum"` or `"mean"` over classes.
        reduction, name, dtype: as for every `keras.losses.Loss`.

    Call arguments:
        y_true: one-hot labels `(batch, num_classes)`, or class ids
            `(batch,)` or `(batch, 1)`, converted to one-hot
            (`keras_capsules.labels.one_hot`: an id outside `[0,
            num_classes)` is a row of zeros); any other shape is a
            `ValueError`.
        y_pred: capsule lengths `(batch, num_classes)`.
        sample_weight: optional `(batch,)` weights.

    Returns:
        the loss, a scalar (or `(batch,)` with `reduction=None`).

    Example (`model.compile(loss=keras_capsules.losses.MarginLoss())`
    for a model whose outputs are capsule lengths):

    >>> loss = keras_capsules.losses.MarginLoss()
    >>> y_true = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> y_pred = np.array([[0.8, 0.3], [0.5, 0.95]])
    >>> # (0.1^2 + 0.5 * 0.2^2 + 0.5 * 0.4^2 + 0) / 2
    >>> round(float(ops.convert_to_numpy(loss(y_true, y_pred))), 4)
    0.055

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017.
    """

    def __init__(
        self,
        m_plus=0.9,
        m_minus=0.1,
        down_weight=0.5,
        class_reduction="sum",
        reduction="sum_over_batch_size",
        name="margin_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.m_plus = finite_float(m_plus, "m_plus", 0.0, 1.0)
        self.m_minus = finite_float(m_minus, "m_minus", 0.0, 1.0, True, False)
        if self.m_minus >= self.m_plus:
            raise ValueError(
                "`m_minus` must be smaller than `m_plus`. "
                f"Received: m_plus={m_plus!r}, m_minus={m_minus!r}"
            )
        self.down_weight = non_negative_float(down_weight, "down_weight")
        self.class_reduction = one_of(class_reduction, ("sum", "mean"), "class_reduction")

    def call(self, y_true, y_pred):
        lengths = ops.cast(y_pred, "float32")
        y_true = one_hot(y_true, lengths.shape[-1])
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


class _MarginState(keras.metrics.Metric):
    """Holds the spread-loss margin as state of the compiled train step.

    A loss has no variables of its own in a Keras train step: under JAX a
    variable read by a loss is baked into the jitted function as a
    constant. A metric's variables are part of the train step's state on
    every backend, so `SpreadLossMarginScheduler` attaches this metric to
    the model. It never updates or resets (the margin is not a running
    statistic); its result is the margin, so it shows in the training logs.
    """

    def __init__(self, margin, name="margin"):
        super().__init__(name=name, dtype="float32")
        # Metric variables sync on read; with the default "sum" aggregation a
        # cross-replica assign under tf.distribute gives each replica
        # margin / num_replicas. "mean" gives each replica the margin.
        self.margin = self.add_variable(
            shape=(),
            initializer=keras.initializers.Constant(margin),
            aggregation="mean",
            name="margin",
        )

    def update_state(self, *args, **kwargs):
        pass

    def reset_state(self):
        pass

    def result(self):
        # A copy: on JAX the variable's own buffer is donated to (and deleted
        # by) the next compiled step, before the logs holding it are read.
        return ops.copy(self.margin)


@keras.saving.register_keras_serializable(package="keras_capsules")
class SpreadLoss(keras.losses.Loss):
    """Spread loss of matrix capsules (Hinton, Sabour & Frosst, 2018), eq. 3.

    For one-hot labels (target class `t`) and class activations `a`:

    ```
    L = sum_{i != t} relu(margin - (a_t - a_i))^2
    ```

    then the usual Keras batch `reduction`. Computed in float32. The
    margin is a non-trainable variable (`loss.margin`);
    `keras_capsules.callbacks.SpreadLossMarginScheduler` raises it during
    training (the paper: from 0.2 to 0.9). Assign it through that callback
    during `fit`: it also makes the margin part of the compiled train
    step's state, which a plain assignment does not on JAX.

    Args:
        margin: the initial margin, `> 0`.
        reduction, name, dtype: as for every `keras.losses.Loss`.

    Call arguments:
        y_true: one-hot labels `(batch, num_classes)`, or class ids
            `(batch,)` or `(batch, 1)`, as for `MarginLoss`.
        y_pred: class activations `(batch, num_classes)`.
        sample_weight: optional, `(batch,)`.

    Returns:
        the reduced loss: a scalar, `(batch,)` with `reduction=None`.

    Example (`model.compile(loss=keras_capsules.losses.SpreadLoss())` for
    a model whose outputs are class activations):

    >>> loss = keras_capsules.losses.SpreadLoss(margin=0.5)
    >>> y_true = np.array([[1.0, 0.0, 0.0]])
    >>> y_pred = np.array([[0.6, 0.3, 0.9]])
    >>> # relu(0.5 - 0.3)^2 + relu(0.5 + 0.3)^2 = 0.04 + 0.64
    >>> round(float(ops.convert_to_numpy(loss(y_true, y_pred))), 4)
    0.68

    Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing",
    ICLR 2018.
    """

    def __init__(self, margin=0.2, reduction="sum_over_batch_size", name="spread_loss", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.margin_state = _MarginState(positive_float(margin, "margin"))

    @property
    def margin(self):
        """The margin variable (non-trainable, float32)."""
        return self.margin_state.margin

    def call(self, y_true, y_pred):
        activations = ops.cast(y_pred, "float32")
        y_true = one_hot(y_true, activations.shape[-1])
        target = ops.sum(y_true * activations, axis=-1, keepdims=True)
        margin = ops.cast(self.margin, "float32")
        spread = ops.square(ops.relu(margin - (target - activations)))
        return ops.sum((1.0 - y_true) * spread, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(margin=float(ops.convert_to_numpy(self.margin)))
        return config


def _check_segmentation_rank(y_pred, name):
    """Raises unless `y_pred` is `(batch, ..., classes)` with a spatial axis."""
    if len(y_pred.shape) < 3:
        raise ValueError(
            f"`{name}` expects scores of shape (batch, ..., classes) with at least "
            f"one spatial axis, such as (batch, height, width, classes). "
            f"Received: y_pred.shape={tuple(y_pred.shape)}"
        )


@keras.saving.register_keras_serializable(package="keras_capsules")
class WeightedBinaryCrossentropy(keras.losses.Loss):
    """Binary cross-entropy with a weight on the foreground pixels.

    For a mask `y` in {0, 1} and a foreground score `p`, per pixel and
    class:

    ```
    l = -(positive_weight * y * log(p) + (1 - y) * log(1 - p))
    ```

    with `p` clipped to `[epsilon, 1 - epsilon]`, so scores of exactly 0
    or 1 (capsule lengths of a saturated squash) give finite values and
    gradients. With `from_logits=True`, `y_pred` holds logits `x`,
    `p = sigmoid(x)`, and the loss is computed in the numerically stable
    form of `tf.nn.weighted_cross_entropy_with_logits` (no clipping):

    ```
    l = (1 - y) * x + (1 + (positive_weight - 1) * y) * softplus(-x)
    ```

    The loss of one image is the mean of `l` over its pixels and classes
    (all axes but the batch axis), so `sample_weight` weighs images; the
    usual Keras `reduction` then reduces over the batch. Computed in
    float32, also under mixed precision.

    SegCaps sets `positive_weight` to the ratio of background to
    foreground pixels of the training set, so that the rare foreground
    counts as much as the background.

    Args:
        positive_weight: weight of the foreground term, `> 0`;
            `1.0` is plain binary cross-entropy.
        from_logits: whether `y_pred` holds logits rather than scores in
            [0, 1].
        epsilon: clipping bound of the scores, `0 < epsilon < 0.5`
            (not used with `from_logits=True`).
        reduction, name, dtype: as for every `keras.losses.Loss`.

    Call arguments:
        y_true: masks in {0, 1}, `(batch, height, width, classes)` (any
            shape `(batch, ...)` works).
        y_pred: foreground scores (capsule lengths) or logits, of the
            shape of `y_true`.
        sample_weight: optional `(batch,)` weights, one per image.

    Returns:
        the loss, a scalar (or `(batch,)` with `reduction=None`).

    Example (`model.compile(loss=...)` for a model whose outputs are
    per-pixel capsule lengths):

    >>> loss = keras_capsules.losses.WeightedBinaryCrossentropy(positive_weight=2.0)
    >>> y_true = np.array([[[[1.0], [0.0]]]])  # one 1 x 2 image, one class
    >>> y_pred = np.array([[[[0.8], [0.4]]]])
    >>> # -(2 * log(0.8) + log(0.6)) / 2
    >>> round(float(ops.convert_to_numpy(loss(y_true, y_pred))), 4)
    0.4786

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation",
    arXiv:1804.04241, 2018.
    """

    def __init__(
        self,
        positive_weight=1.0,
        from_logits=False,
        epsilon=1e-7,
        reduction="sum_over_batch_size",
        name="weighted_binary_crossentropy",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.positive_weight = positive_float(positive_weight, "positive_weight")
        self.from_logits = boolean(from_logits, "from_logits")
        self.epsilon = finite_float(epsilon, "epsilon", 0.0, 0.5, False, False)

    def call(self, y_true, y_pred):
        y_pred = ops.cast(y_pred, "float32")
        y_true = ops.cast(y_true, "float32")
        if self.from_logits:
            # softplus(-x), stable for logits of either sign.
            softplus = ops.log1p(ops.exp(-ops.abs(y_pred))) + ops.relu(-y_pred)
            weight = 1.0 + (self.positive_weight - 1.0) * y_true
            per_element = (1.0 - y_true) * y_pred + weight * softplus
        else:
            # max(p, eps) and max(1 - p, eps) clip p to [eps, 1 - eps]; 1 - p
            # is exact in float32, where 1 - eps may round to 1 for a small eps.
            log_p = ops.log(ops.maximum(y_pred, self.epsilon))
            log_not_p = ops.log(ops.maximum(1.0 - y_pred, self.epsilon))
            per_element = -(self.positive_weight * y_true * log_p + (1.0 - y_true) * log_not_p)
        axes = tuple(range(1, len(per_element.shape)))
        return ops.mean(per_element, axis=axes) if axes else per_element

    def get_config(self):
        config = super().get_config()
        config.update(
            positive_weight=self.positive_weight,
            from_logits=self.from_logits,
            epsilon=self.epsilon,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_capsules")
class SoftDiceLoss(keras.losses.Loss):
    """Soft Dice loss: one minus the Dice coefficient of scores and masks.

    For a mask `y` in {0, 1} and foreground scores `p` in [0, 1], per
    image and class, with sums over the pixels (all axes between the
    batch and class axes):

    ```
    L_k = 1 - (2 * sum(p * y) + smooth) / (sum(p) + sum(y) + smooth)
    ```

    The loss of one image is the mean of `L_k` over its classes; the
    usual Keras `reduction` then reduces over the batch. An image whose
    mask and scores are both empty has loss 0. Computed in float32, also
    under mixed precision.

    The loss is applied to the scores (capsule lengths), the usual soft
    Dice; the SegCaps authors' released code applies it to logits.

    Args:
        smooth: added to the numerator and the denominator, `> 0`; keeps
            the loss defined for empty masks and smooths its gradient.
        reduction, name, dtype: as for every `keras.losses.Loss`.

    Call arguments:
        y_true: masks in {0, 1}, `(batch, height, width, classes)` (or
            `(batch, ..., classes)` with any number of spatial axes).
        y_pred: foreground scores in [0, 1], of the shape of `y_true`.
        sample_weight: optional `(batch,)` weights, one per image.

    Returns:
        the loss, a scalar (or `(batch,)` with `reduction=None`).

    Example:

    >>> loss = keras_capsules.losses.SoftDiceLoss(smooth=0.0001)
    >>> y_true = np.array([[[[1.0], [0.0]]]])  # one 1 x 2 image, one class
    >>> y_pred = np.array([[[[0.8], [0.4]]]])
    >>> # 1 - 2 * 0.8 / (1.2 + 1)
    >>> round(float(ops.convert_to_numpy(loss(y_true, y_pred))), 4)
    0.2727

    Reference: Milletari, Navab & Ahmadi, "V-Net: Fully Convolutional
    Neural Networks for Volumetric Medical Image Segmentation", 3DV 2016;
    LaLonde & Bagci, "Capsules for Object Segmentation", arXiv:1804.04241,
    2018.
    """

    def __init__(
        self,
        smooth=1e-5,
        reduction="sum_over_batch_size",
        name="soft_dice_loss",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.smooth = positive_float(smooth, "smooth")

    def call(self, y_true, y_pred):
        _check_segmentation_rank(y_pred, "SoftDiceLoss")
        y_pred = ops.cast(y_pred, "float32")
        y_true = ops.cast(y_true, "float32")
        axes = tuple(range(1, len(y_pred.shape) - 1))
        overlap = ops.sum(y_pred * y_true, axis=axes)
        total = ops.sum(y_pred, axis=axes) + ops.sum(y_true, axis=axes)
        dice = (2.0 * overlap + self.smooth) / (total + self.smooth)
        return ops.mean(1.0 - dice, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(smooth=self.smooth)
        return config


@keras.saving.register_keras_serializable(package="keras_capsules")
class ChamferDistance(keras.losses.Loss):
    """Chamfer distance between two point clouds (a reconstruction loss).

    For clouds `P` (`n` points) and `Q` (`m` points) of one example:

    ```
    L = mean_i min_j |p_i - q_j|^2 + mean_j min_i |q_j - p_i|^2
    ```

    (squared Euclidean distances, as the 3D point-capsule networks' loss).
    The `n x m` distances of an example are computed `chunk_size` points of
    `y_true` at a time, `|p|^2 + |q|^2 - 2 p . q` (one matrix product per
    chunk), so that a batch of clouds of 2048 points never holds all its
    `batch x 2048 x 2048` distances at once: the nearest points of `Q` are
    taken chunk by chunk, those of `P` as a running minimum. Computed in
    float32, also under mixed precision.

    Args:
        chunk_size: points of `y_true` per chunk, `>= 1`; `None` computes
            all distances at once.
        reduction, name, dtype: as for every `keras.losses.Loss`.

    Call arguments:
        y_true: `(batch, n, dim)` points (any `dim`, 3 for 3-D clouds).
        y_pred: `(batch, m, dim)` points; `m` may differ from `n`.
        sample_weight: optional `(batch,)` weights, one per cloud.

    Returns:
        the loss, a scalar (or `(batch,)` with `reduction=None`).

    Example:

    >>> loss = keras_capsules.losses.ChamferDistance()
    >>> p = np.array([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    >>> q = np.array([[[0.0, 0.0, 0.5]]])
    >>> # p -> q: (0.25 + 1.25) / 2; q -> p: 0.25
    >>> round(float(ops.convert_to_numpy(loss(p, q))), 4)
    1.0

    Reference: Fan, Su & Guibas, "A Point Set Generation Network for 3D
    Object Reconstruction from a Single Image", CVPR 2017; Zhao, Birdal,
    Deng & Tombari, "3D Point Capsule Networks", CVPR 2019.
    """

    def __init__(
        self,
        chunk_size=512,
        reduction="sum_over_batch_size",
        name="chamfer_distance",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.chunk_size = None if chunk_size is None else positive_int(chunk_size, "chunk_size")

    def call(self, y_true, y_pred):
        if len(y_true.shape) != 3 or len(y_pred.shape) != 3:
            raise ValueError(
                "ChamferDistance expects point clouds of shape (batch, points, dim). "
                f"Received: y_true.shape={tuple(y_true.shape)}, y_pred.shape={tuple(y_pred.shape)}"
            )
        p = ops.cast(y_true, "float32")
        q = ops.cast(y_pred, "float32")
        q_squared = ops.sum(ops.square(q), axis=-1)[:, None, :]  # (b, 1, m)
        n = p.shape[1]
        if n is None or self.chunk_size is None or self.chunk_size >= n:
            starts = [0]
            size = n
        else:
            # A loop over chunks of points, not over points: its count is
            # fixed when the loss is traced, and each chunk is one matmul.
            starts = list(range(0, n, self.chunk_size))
            size = self.chunk_size
        nearest_in_q = []
        nearest_in_p = None
        for start in starts:
            chunk = p if size is None else p[:, start : start + size]
            distances = (
                ops.sum(ops.square(chunk), axis=-1)[:, :, None]
                + q_squared
                - 2.0 * ops.matmul(chunk, ops.transpose(q, (0, 2, 1)))
            )
            distances = ops.maximum(distances, 0.0)  # rounding can go below 0
            nearest_in_q.append(ops.min(distances, axis=2))
            column = ops.min(distances, axis=1)
            nearest_in_p = column if nearest_in_p is None else ops.minimum(nearest_in_p, column)
        forward = (
            ops.concatenate(nearest_in_q, axis=1) if len(nearest_in_q) > 1 else nearest_in_q[0]
        )
        return ops.mean(forward, axis=1) + ops.mean(nearest_in_p, axis=1)

    def get_config(self):
        config = super().get_config()
        config.update(chunk_size=self.chunk_size)
        return config
