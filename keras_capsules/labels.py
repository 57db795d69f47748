"""Class labels as the capsule losses take them: class ids or one-hot."""

import numpy as np
from keras import ops


def one_hot(y_true, num_classes, name="y_true"):
    """Class ids or one-hot labels -> float32 one-hot `(..., num_classes)`.

    Accepted, for predictions of shape `(batch, num_classes)`:

    - one-hot (or soft) labels `(batch, num_classes)`, taken as they are;
    - class ids `(batch,)`, or `(batch, 1)` (Keras's sparse-label shape)
      when `num_classes > 1`; with one class a `(batch, 1)` label is read
      as one-hot.

    An id outside `[0, num_classes)` (a negative id too) gives a row of
    zeros on every backend: no class is present, so a margin loss pushes
    every score down. The ready models refuse such ids in `fit` and
    `evaluate` when the labels are arrays (`check_class_ids`).

    Args:
        y_true: the labels.
        num_classes: the number of classes (the predictions' last axis).
        name: the argument's name, for the error message.

    Returns:
        float32 one-hot labels `(batch, num_classes)`.

    Raises:
        ValueError: for any other shape.

    Example:

    >>> from keras_capsules.labels import one_hot
    >>> ops.convert_to_numpy(one_hot(np.array([[2], [0]]), 3)).tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    >>> ops.convert_to_numpy(one_hot(np.array([3, -1]), 3)).tolist()  # out of range
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    y_true = ops.convert_to_tensor(y_true)
    try:
        shape = tuple(y_true.shape)
    except ValueError:  # TensorFlow: labels whose rank is not known
        raise ValueError(
            f"`{name}` has no known rank, so class ids and one-hot labels cannot be "
            "told apart. On TensorFlow this happens when one model is trained on "
            "labels of different ranks (its train step is traced again with a "
            "relaxed shape): give the labels one shape. "
            f"Received: {name}.shape={y_true.shape}"
        ) from None
    if len(shape) == 2 and shape[-1] == num_classes:
        return ops.cast(y_true, "float32")
    if len(shape) == 1 or (len(shape) == 2 and shape[-1] == 1):
        return _ids_to_one_hot(y_true, num_classes)
    raise _shape_error(name, num_classes, shape)


def _ids_to_one_hot(ids, num_classes):
    ids = ops.cast(ops.reshape(ids, (-1,)), "int32")
    # Not ops.one_hot: torch raises on ids out of range, TensorFlow and JAX
    # give zeros; the comparison gives zeros on every backend.
    classes = ops.arange(num_classes, dtype="int32")
    return ops.cast(ops.equal(ids[:, None], classes[None, :]), "float32")


def multi_hot(y_true, num_classes, labels_per_image, name="y_true"):
    """`labels_per_image` class ids per image `(batch, k)`, or k-hot labels
    `(batch, num_classes)`, -> float32 k-hot `(batch, num_classes)`.

    The ids of one image are distinct classes; an id outside `[0,
    num_classes)` adds nothing (as in `one_hot`).

    Example:

    >>> from keras_capsules.labels import multi_hot
    >>> ops.convert_to_numpy(multi_hot(np.array([[2, 0]]), 3, 2)).tolist()
    [[1.0, 0.0, 1.0]]
    """
    y_true = ops.convert_to_tensor(y_true)
    shape = tuple(y_true.shape)
    if len(shape) == 2 and shape[-1] == num_classes:
        return ops.cast(y_true, "float32")
    if len(shape) == 2 and shape[-1] == labels_per_image:
        ids = ops.cast(y_true, "int32")
        classes = ops.arange(num_classes, dtype="int32")
        hits = ops.equal(ids[:, :, None], classes[None, None, :])
        return ops.cast(ops.any(hits, axis=1), "float32")
    raise _multi_shape_error(name, num_classes, labels_per_image, shape)


def class_targets(y, num_classes, labels_per_image=1, name="y"):
    """The labels of a ready model as float32 targets `(batch, num_classes)`:
    `one_hot` for one label per image, `multi_hot` for several (`y` may then
    be a dict whose `"labels"` are the ids)."""
    if isinstance(y, dict):
        if "labels" not in y:
            raise ValueError(
                f"`{name}` as a dict must have a 'labels' entry (the class ids). "
                f"Received: keys {sorted(y)}"
            )
        y = y["labels"]
    if labels_per_image == 1:
        return one_hot(y, num_classes, name)
    return multi_hot(y, num_classes, labels_per_image, name)


def check_class_ids(y, num_classes, name="y", labels_per_image=1):
    """Raises a `ValueError` if array labels `y` hold a class id outside
    `[0, num_classes)`; one-hot labels and anything that is not an array
    (a dataset, a generator) pass unchecked.

    Args:
        y: labels, as given to `fit` or `evaluate`.
        num_classes: the number of classes.
        name: the argument's name, for the message.
        labels_per_image: class ids per image: `(batch, k)` ids when `> 1`.

    Example:

    >>> from keras_capsules.labels import check_class_ids
    >>> check_class_ids(np.array([0, 3]), 3)
    Traceback (most recent call last):
        ...
    ValueError: `y` must hold class ids in [0, 3). Received: ids from 0 to 3
    """
    if not (isinstance(y, np.ndarray) or ops.is_tensor(y)):
        return
    shape = tuple(y.shape)
    if len(shape) == 2 and shape[-1] == num_classes:
        return  # one-hot
    if labels_per_image > 1:
        if not (len(shape) == 2 and shape[-1] == labels_per_image):
            raise _multi_shape_error(name, num_classes, labels_per_image, shape)
    elif not (len(shape) == 1 or (len(shape) == 2 and shape[-1] == 1)):
        raise _shape_error(name, num_classes, shape)
    ids = np.asarray(ops.convert_to_numpy(y))
    if ids.size and (ids.min() < 0 or ids.max() >= num_classes):
        raise ValueError(
            f"`{name}` must hold class ids in [0, {num_classes}). "
            f"Received: ids from {ids.min():g} to {ids.max():g}"
        )


def _shape_error(name, num_classes, shape):
    return ValueError(
        f"`{name}` must be class ids of shape (batch,) or (batch, 1), or one-hot "
        f"labels of shape (batch, {num_classes}). Received: {name}.shape={shape}"
    )


def _multi_shape_error(name, num_classes, labels_per_image, shape):
    return ValueError(
        f"`{name}` must be {labels_per_image} class ids per image, shape (batch, "
        f"{labels_per_image}), or k-hot labels of shape (batch, {num_classes}). "
        f"Received: {name}.shape={shape}"
    )
