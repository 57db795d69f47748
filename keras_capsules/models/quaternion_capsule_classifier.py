"""Rotation-invariant point-cloud classification with quaternion capsules
(Zhao et al., 2020)."""

import warnings

import keras
from keras import ops

from keras_capsules import point_cloud, routing
from keras_capsules.deprecation import REMOVED_IN, renamed
from keras_capsules.layers.local_reference_frames import LocalReferenceFrames
from keras_capsules.layers.quaternion_capsule import QuaternionCapsule
from keras_capsules.losses import SpreadLoss
from keras_capsules.models.capsule_task import CapsuleTask
from keras_capsules.routing.quaternion import QuaternionRouting
from keras_capsules.validation import positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class QuaternionCapsuleClassifier(CapsuleTask):
    """Classifies point clouds in any orientation: quaternion capsules.

    ```
    points  (batch, n, 3), centred on their mean
    frames = LocalReferenceFrames(frame_neighbors)(points)      a rotation per point
    patches: the first num_patches points, each with its patch_size nearest points
    patch capsules = QuaternionCapsule(primary_capsules)(offsets to the patch's point,
                                                 the points' frames, activations 1)
    class capsules = QuaternionCapsule(num_classes)(the patch points' positions,
                                                    the patch capsules, their activations)
    scores = class activations (batch, num_classes), in (0, 1)
    ```

    Every step is rotation-equivariant (the frames and the capsule poses
    turn with the cloud) or invariant (neighbourhoods, offsets in the
    capsules' own frames, activations), so the scores do not change when
    the cloud is rotated: trained on aligned clouds, the model classifies
    rotated ones as well (up to where the local frames are ill-defined,
    see `keras_capsules.point_cloud.local_reference_frames`). The class
    capsules' poses (`return_poses=True`) rotate with the cloud.

    The patches are centred on the first `num_patches` points of each
    cloud, which are a random sample when the points come in random order
    (shuffle them otherwise); nothing depends on their coordinates, so the
    choice does not break the invariance.

    Clouds of different sizes, padded to one: `mask=` (or a Keras mask)
    `(batch, n)`, `True` = keep. Dropped points take no part (centring,
    neighbourhoods, frames, patches: the first `num_patches` kept points)
    and a padded cloud gets the scores of the unpadded one, while it keeps
    at least `max(num_patches, patch_size, frame_neighbors)` points.
    Whatever a dropped point holds (NaN too) takes no part; a cloud with a
    NaN or Inf coordinate in a kept point gets NaN scores, and the other
    clouds of the batch their own scores (`LocalReferenceFrames`).

    The task contract of every ready model (`CapsuleTask`):
    `compile(optimizer="auto", loss="auto", metrics="auto")` gives Adam
    (1e-2), `SpreadLoss(margin=0.1)` on the activations (as the authors)
    and accuracy; labels are class ids `(batch,)` or `(batch, 1)`, or
    one-hot; a saved model comes back compiled and resumes training on
    any backend.

    Args:
        num_classes: number of classes, `>= 2`.
        primary_capsules: capsule types per patch (formerly `capsules`).
        num_patches: patches per cloud (`<=` the points per cloud).
        patch_size: points per patch.
        frame_neighbors: neighbourhood of the local reference frames.
        router: the router of both capsule layers (each gets its own
            copy): a `routing.QuaternionRouting` or its config; default
            `QuaternionRouting(iterations=3)`. (`iterations=n`, the former
            argument, gives `QuaternionRouting(n)`.) With
            `QuaternionRouting(closed_form=True)` the local frames too find
            their eigenvectors in closed form: faster steps under XLA
            (`compile(jit_compile=True)` on TensorFlow; JAX), slower to
            compile.
        **kwargs: `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        points: `(batch, n, 3)`, `n >= num_patches, patch_size, frame_neighbors`.
        training: unused (no layer behaves differently in training).
        mask: optional booleans `(batch, n)`, `True` = keep.
        return_poses: also return the class capsules' poses `(batch,
            num_classes, 4)`.

    Returns:
        scores `(batch, num_classes)`; with `return_poses=True`, `(scores,
        poses)`.

    Example:

    >>> model = keras_capsules.models.QuaternionCapsuleClassifier(
    ...     3, primary_capsules=4, num_patches=8, patch_size=8, frame_neighbors=8)
    >>> points = np.random.default_rng(0).normal(size=(2, 64, 3)).astype("float32")
    >>> tuple(model(points).shape)
    (2, 3)

    Reference: Zhao, Birdal, Lenssen, Menegatti, Guibas & Tombari,
    "Quaternion Equivariant Capsule Networks for 3D Point Clouds", ECCV
    2020; the spread loss: Hinton, Sabour & Frosst, "Matrix Capsules with
    EM Routing", ICLR 2018.
    """

    inputs_name = "point clouds"
    min_classes = 2
    takes_mask = True
    default_learning_rate = 1e-2

    def __init__(
        self,
        num_classes,
        primary_capsules=None,
        num_patches=64,
        patch_size=16,
        frame_neighbors=16,
        router=None,
        **kwargs,
    ):
        primary_capsules = renamed(
            kwargs, "capsules", "primary_capsules", primary_capsules, type(self).__name__
        )
        if "iterations" in kwargs:  # 0.2.0's argument
            iterations = kwargs.pop("iterations")
            if router is not None:
                raise ValueError(
                    "`iterations` is the former way to set the router's: give `router` only. "
                    f"Received: iterations={iterations!r}, router={router!r}"
                )
            warnings.warn(
                f"{type(self).__name__}(iterations=n) is now router=QuaternionRouting(n) "
                f"(iterations= goes in {REMOVED_IN}).",
                DeprecationWarning,
                stacklevel=2,
            )
            router = QuaternionRouting(positive_int(iterations, "iterations"))
        super().__init__(input_shape=(None, 3), num_classes=num_classes, **kwargs)
        self.primary_capsules = positive_int(
            16 if primary_capsules is None else primary_capsules, "primary_capsules"
        )
        self.num_patches = positive_int(num_patches, "num_patches")
        self.patch_size = positive_int(patch_size, "patch_size")
        self.frame_neighbors = positive_int(frame_neighbors, "frame_neighbors")
        router = QuaternionRouting() if router is None else routing.get(router)
        # Saved as given: each capsule layer routes with a clone of it.
        self.router_config = routing.serialize(router)
        dtype = self.dtype_policy
        # The frames' eigenvectors as the router's means' (closed form or eigh).
        self.frames = LocalReferenceFrames(
            self.frame_neighbors,
            closed_form=getattr(router, "closed_form", False),
            dtype=dtype,
            name="frames",
        )
        self.patch_capsules = QuaternionCapsule(
            self.primary_capsules,
            router=routing.clone(router, dtype=dtype),
            dtype=dtype,
            name="patch_capsules",
        )
        self.class_capsules = QuaternionCapsule(
            self.num_classes,
            router=routing.clone(router, dtype=dtype),
            dtype=dtype,
            name="class_capsules",
        )
        # Built from shapes here: a symbolic call does not build sublayers
        # on every backend.
        p, k, c = self.num_patches, self.patch_size, self.primary_capsules
        self.frames.build((None, None, 3))
        self.patch_capsules.build([(None, p, k, 3), (None, p, k, 1, 4), (None, p, k, 1)])
        self.class_capsules.build([(None, 1, p, 3), (None, 1, p, c, 4), (None, 1, p, c)])
        self.built = True

    def check_inputs(self, x, name="x"):
        super().check_inputs(x, name)
        shape = getattr(x, "shape", None)
        if shape is not None and not isinstance(x, dict) and len(shape) == 3:
            self._check(tuple(shape), name)

    def _check(self, points_shape, name="points"):
        points_shape = tuple(points_shape)
        needed = max(self.num_patches, self.patch_size, self.frame_neighbors)
        if (
            len(points_shape) != 3
            or points_shape[-1] != 3
            or (isinstance(points_shape[1], int) and points_shape[1] < needed)
        ):
            raise ValueError(
                f"QuaternionCapsuleClassifier expects points of shape (batch, n, 3), "
                f"n >= {needed} (num_patches, patch_size, frame_neighbors). "
                f"Received: {name}.shape={points_shape}"
            )

    def scores_and_poses(self, points, training=None, mask=None):
        self._check(points.shape)
        points = ops.convert_to_tensor(points)
        if mask is None:
            centre = ops.mean(points, axis=1, keepdims=True)
        else:
            keep = ops.cast(mask, points.dtype)[..., None]
            count = ops.maximum(ops.sum(keep, axis=1, keepdims=True), 1.0)
            # Dropped points take no part, whatever they hold (NaN too).
            kept = ops.where(ops.cast(mask, "bool")[..., None], points, ops.zeros_like(points))
            centre = ops.sum(kept, axis=1, keepdims=True) / count
        points = points - centre
        frames = self.frames(points, mask=mask)
        centres = (
            points[:, : self.num_patches]
            if mask is None
            else _first_kept(points, mask, self.num_patches)
        )
        # num_patches of them, also where the number of points is unknown
        # (traced for export).
        centres = ops.reshape(centres, (-1, self.num_patches, 3))
        neighbors = point_cloud.nearest_neighbors(centres, points, self.patch_size, mask)
        offsets = point_cloud.gather(points, neighbors) - centres[:, :, None]
        poses = point_cloud.gather(frames, neighbors)[:, :, :, None]
        activations = ops.ones_like(poses[..., 0])
        poses, activations = self.patch_capsules([offsets, poses, activations])
        poses, activations = self.class_capsules(
            [centres[:, None], poses[:, None], activations[:, None]]
        )
        return activations[:, 0], poses[:, 0]

    def compute_output_shape(self, points_shape, return_poses=False):
        self._check(points_shape)
        scores = (points_shape[0], self.num_classes)
        return (scores, (points_shape[0], self.num_classes, 4)) if return_poses else scores

    def default_loss(self):
        """`SpreadLoss(margin=0.1)` on the class activations, as the authors."""
        return SpreadLoss(margin=0.1)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_classes=self.num_classes,
            primary_capsules=self.primary_capsules,
            num_patches=self.num_patches,
            patch_size=self.patch_size,
            frame_neighbors=self.frame_neighbors,
            router=self.router_config,
        )
        return config


def _first_kept(points, mask, count):
    """The first `count` points of each cloud that `mask` keeps, in their
    order (a cloud that keeps fewer: its dropped points after them)."""
    n = points.shape[1] or ops.shape(points)[1]
    order = ops.cast(ops.arange(n), "float32")
    # Kept points rank above dropped ones, earlier ones above later ones.
    rank = ops.where(ops.cast(mask, "bool"), 2.0 * n - order, n - order)
    _, indices = ops.top_k(rank, count)
    return ops.take_along_axis(points, ops.cast(indices, "int32")[..., None], axis=1)
