"""The task base of the image models: `CapsuleTask` with images of one shape."""

from keras_capsules.models.capsule_task import CapsuleTask
from keras_capsules.validation import int_tuple, positive_int


class CapsuleModel(CapsuleTask):
    """The task base of the image models: images in, scores out.

    `CapsuleTask`'s contract (what every ready model keeps) with images of
    one `input_shape` `(height, width, channels)`; its subclasses are the
    task bases `CapsuleClassifier` and `CapsuleSegmenter`, and the ready
    models `MatrixCapsNet`, `HeinsenCapsNet`:

    - `model(images)`, `predict` and `export` give the class scores
      `(batch, num_classes)`; `model(images, return_poses=True)` gives
      `(scores, poses)`, the class capsules' poses too.
    - Labels: class ids `(batch,)` or `(batch, 1)`, or one-hot `(batch,
      num_classes)`; with `labels_per_image=k > 1` (several objects in one
      image, e.g. MultiMNIST), `k` distinct class ids `(batch, k)` or a
      k-hot `(batch, num_classes)`; from a dataset an id outside `[0,
      num_classes)` is a row of zeros (`keras_capsules.labels.one_hot`).
    - `compile()`: Adam with the paper's learning rate
      (`default_learning_rate`), the model's own loss (`default_loss()`:
      margin or spread loss) and accuracy; `jit_compile="auto"` turns XLA
      on with TensorFlow on CPU where `xla_on_cpu`.
    - The loss is the classification loss plus `extra_loss(...)` (the
      reconstruction of `CapsuleClassifier`; none here).

    Subclasses implement `scores_and_poses(images, training)` and
    `default_loss()`, and may override `extra_loss`; `call`,
    `train_step`, `test_step`, `compute_loss` and `compute_metrics` keep
    the contract and should not be overridden.

    Args:
        input_shape: image shape `(height, width, channels)`.
        num_classes: number of classes.
        labels_per_image: objects (class labels) per image, `>= 1`.
        **kwargs: `keras.Model` arguments (`name`, `dtype`, ...).

    Call arguments:
        images: `(batch, height, width, channels)`.
        training: whether the layers run in training mode.
        return_poses: `True` for `(scores, poses)`, `False` for the
            scores; `None` (default): `model.returns_poses`.

    Returns:
        class scores `(batch, num_classes)`, or `(scores, poses)`.

    Example (the contract through a ready model):

    >>> model = keras_capsules.models.CapsNet((20, 20, 1), 3, conv_filters=4,
    ...     primary_capsules=2, primary_dim=4, capsule_dim=4, decoder_units=(8,))
    >>> images = np.random.default_rng(0).uniform(size=(2, 20, 20, 1))
    >>> scores, poses = model(images, return_poses=True)
    >>> tuple(scores.shape), tuple(poses.shape), model.returns_poses
    ((2, 3), (2, 3, 4), False)
    >>> model.compile()  # Adam(1e-3), MarginLoss(), accuracy
    >>> round(float(model.optimizer.learning_rate), 6) == model.default_learning_rate
    True

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (the margin loss and the label-masked reconstruction).
    """

    #: Whether `compile(jit_compile="auto")` turns XLA on with TensorFlow on
    #: CPU: `True` where the model's train step was measured faster with it
    #: there (CapsNet, the MNIST Efficient-CapsNet, MatrixCapsNet).
    xla_on_cpu = True
    inputs_name = "images"

    def __init__(self, input_shape, num_classes, labels_per_image=1, **kwargs):
        image_shape = int_tuple(input_shape, 3, "input_shape")
        super().__init__(
            input_shape=image_shape,
            num_classes=positive_int(num_classes, "num_classes"),
            labels_per_image=labels_per_image,
            **kwargs,
        )
        self.image_shape = image_shape

    def check_images(self, x, name="x"):
        """`check_inputs`: raises a `ValueError` naming `name` unless images
        `x` have the shape `(batch, *input_shape)`."""
        self.check_inputs(x, name)

    def get_config(self):
        config = super().get_config()  # name, trainable, dtype (the policy)
        config.update(input_shape=self.image_shape, num_classes=self.num_classes)
        return config
