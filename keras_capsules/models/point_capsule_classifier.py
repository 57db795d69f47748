"""Point-cloud classification from the latent capsules of a PointCapsNet:
the paper's linear probe and a supervised capsule head."""

import keras

from keras_capsules import routing
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.length import Length
from keras_capsules.losses import MarginLoss
from keras_capsules.models.capsule_task import CapsuleTask
from keras_capsules.models.point_capsnet import PointCapsNet
from keras_capsules.validation import one_of, positive_int

_HEADS = ("capsules", "linear")


@keras.saving.register_keras_serializable(package="keras_capsules")
class PointCapsuleClassifier(CapsuleTask):
    """Classifies point clouds by their `PointCapsNet` latent capsules.

    ```
    latent = autoencoder.encode(points, mask)      (batch, latent_capsules, latent_dim)
    head="capsules":  scores = |Capsule(num_classes, capsule_dim)(latent)|   margin loss
    head="linear":    logits = standardize(flatten(latent)) @ W + b          cross-entropy
    ```

    - The paper's transfer protocol (section 5.3): train the autoencoder on
      unlabelled clouds, freeze it (`autoencoder.trainable = False`, its
      batch normalisations then run in inference mode) and train a linear
      classifier on its latent capsules: `head="linear"`. The features are
      standardised by a batch normalisation without scale or offset (an
      affine map at inference, so the classifier stays linear; as in the
      linear probes of He et al. 2022): the latent capsules vary little
      from cloud to cloud next to their lengths.
    - Supervised capsules: one class capsule per class routed from the
      latent capsules (dynamic routing by default), scored by its length
      and trained with the margin loss end to end with `fit(points,
      labels)`: `head="capsules"`, the default.

    The task contract of every ready model (`CapsuleTask`):
    `compile(optimizer="auto", loss="auto", metrics="auto")` gives Adam
    (1e-3, 1e-2 for the linear head), `MarginLoss()` on the lengths or
    `CategoricalCrossentropy(from_logits=True)` for the linear head, and
    accuracy; labels are class ids `(batch,)` or `(batch, 1)`, or one-hot;
    `return_poses=True` also gives the class capsules' poses (the latent
    capsules with the linear head); a saved model comes back compiled and
    resumes training on any backend. The autoencoder is saved inside the
    `.keras` file. Classification reads the autoencoder's encoder only:
    the decoder's weights are not the classifier's (`weights`,
    `trainable_weights` and `count_params()` leave them out, so the
    optimizer neither holds state for them nor warns that they get no
    gradients); they stay the autoencoder's, saved with it.

    Args:
        autoencoder: a `models.PointCapsNet` (trained, loaded with its
            authors' weights, or new).
        num_classes: number of classes, `>= 2`.
        head: `"capsules"` or `"linear"`.
        capsule_dim: size of a class capsule (`head="capsules"`).
        router: the class capsules' router, its name or config
            (`keras_capsules.routing.get`); default `"dynamic"`.
        **kwargs: `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        points: `(batch, n, 3)`, any `n`.
        mask: optional booleans `(batch, n)`, `True` = keep. A cloud with
            every point dropped gets finite scores, those of the latent
            capsules of an empty cloud (`PointCapsNet.encode`), and (in
            inference) leaves the other clouds' scores as they are alone.
        training: whether the layers run in training mode.
        return_poses: also return the poses.

    Returns:
        class scores `(batch, num_classes)`: capsule lengths in [0, 1) with
        `head="capsules"`, logits with `head="linear"`.

    Example:

    >>> autoencoder = keras_capsules.models.PointCapsNet(
    ...     num_points=64, primary_capsules=32, primary_dim=4, latent_capsules=8, latent_dim=8)
    >>> model = keras_capsules.models.PointCapsuleClassifier(autoencoder, 3)
    >>> points = np.random.default_rng(0).uniform(-1, 1, (2, 100, 3))
    >>> tuple(model(points).shape)
    (2, 3)

    Reference: Zhao, Birdal, Deng & Tombari, "3D Point Capsule Networks",
    CVPR 2019; the margin loss: Sabour, Frosst & Hinton, NeurIPS 2017.
    """

    inputs_name = "point clouds"
    min_classes = 2
    takes_mask = True

    def __init__(
        self, autoencoder, num_classes, head="capsules", capsule_dim=16, router=None, **kwargs
    ):
        super().__init__(input_shape=(None, 3), num_classes=num_classes, **kwargs)
        if isinstance(autoencoder, dict):  # from a config
            autoencoder = keras.saving.deserialize_keras_object(autoencoder)
        if not isinstance(autoencoder, PointCapsNet):
            raise ValueError(
                "`autoencoder` must be a keras_capsules.models.PointCapsNet. "
                f"Received: autoencoder={autoencoder!r}"
            )
        self.autoencoder = autoencoder
        self.head = one_of(head, _HEADS, "head")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        dtype = self.dtype_policy
        latent_shape = (None, autoencoder.latent_capsules, autoencoder.latent_dim)
        if not autoencoder.built:
            autoencoder.build((None, None, 3))
        if self.head == "capsules":
            self.class_capsules = Capsule(
                self.num_classes, self.capsule_dim, router=router or "dynamic",
                name="class_capsules", dtype=dtype,
            )  # fmt: skip
            self.class_capsules.build(latent_shape)
            self.scores = Length(name="scores", dtype=dtype)
            self.scores.build((None, self.num_classes, self.capsule_dim))
        else:
            if router is not None:
                raise ValueError(
                    f"`router` is for head='capsules'. Received: head='linear', router={router!r}"
                )
            features = latent_shape[1] * latent_shape[2]
            self.flatten = keras.layers.Flatten(dtype=dtype, name="flatten")
            self.flatten.build(latent_shape)
            # Latent capsules differ little from cloud to cloud next to their
            # size (their squashed lengths): standardised, a linear probe
            # learns in a few epochs rather than hundreds.
            self.standardize = keras.layers.BatchNormalization(
                center=False, scale=False, dtype=dtype, name="standardize"
            )
            self.standardize.build((None, features))
            self.classifier = keras.layers.Dense(self.num_classes, dtype=dtype, name="classifier")
            self.classifier.build((None, features))
        self.built = True

    def scores_and_poses(self, points, training=None, mask=None):
        self.check_inputs(points, "inputs")  # before any computation
        latent = self.autoencoder.encode(points, mask=mask, training=training)
        if self.head == "capsules":
            poses = self.class_capsules(latent)
            return self.scores(poses), poses
        features = self.standardize(self.flatten(latent), training=training)
        return self.classifier(features), latent

    def compute_output_shape(self, points_shape):
        return (points_shape[0], self.num_classes)

    @property
    def variables(self):
        return self._without_decoder(super().variables)

    @property
    def weights(self):
        return self._without_decoder(super().weights)

    def _without_decoder(self, variables):
        decoder = {id(v) for v in self.autoencoder.decoder.weights}
        return [v for v in variables if id(v) not in decoder]

    @property
    def default_learning_rate(self):
        """Adam's learning rate of `compile()`: 1e-3, 1e-2 for the linear head."""
        return 1e-3 if self.head == "capsules" else 1e-2

    def default_loss(self):
        """`MarginLoss()` on the lengths, or cross-entropy on the linear head's logits."""
        if self.head == "capsules":
            return MarginLoss()
        return keras.losses.CategoricalCrossentropy(from_logits=True)

    def get_config(self):
        config = super().get_config()
        config.update(
            autoencoder=keras.saving.serialize_keras_object(self.autoencoder),
            num_classes=self.num_classes,
            head=self.head,
            capsule_dim=self.capsule_dim,
            router=routing.serialize(self.class_capsules.router)
            if self.head == "capsules"
            else None,
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
