"""Quaternion routing (Zhao et al., 2020): rotations as capsule poses."""

import keras
from keras import ops

from keras_capsules import quaternion
from keras_capsules.routing.base import Router
from keras_capsules.routing.registry import register
from keras_capsules.validation import positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
@register()  # exported, without a short name: it routes quaternion votes only
class QuaternionRouting(Router):
    """Routes rotation votes by their angular agreement.

    Votes are unit quaternions `v[b, i, j]` (`dim = 4`); child activations
    `a[b, i]` (ones when not given) weigh them. With `k = 1..iterations`:

    ```
    c = a                                            (broadcast over parents j)
    repeat:
        w[b, i, j] = c[b, i, j] / sum_i c[b, i, j]
        pose[b, j] = weighted_mean_i(v[b, i, j], w[b, i, j])   top eigenvector of sum_i w v v^T
        c = c * a * (1 - d(pose[b, j], v[b, i, j]))           all but the last iteration
    activation[b, j] = sigmoid(alpha * mean_{i: c > 0} c (1 - d(pose, v)) + beta - 1)
    ```

    `d` is `keras_capsules.quaternion.angular_distance` (the angle over
    pi), `alpha` and `beta` are learned scalars (starting at 1). As in the
    authors' code, the iterations before the last route stopped-gradient
    votes: the gradient reaches the votes through the last weighted mean
    and the activations only. A parent whose children all have activation
    0 gets activation 0 (and the identity pose).

    The means and distances depend on the votes through `v v^T` and
    `|pose . v|` only, so rotating every vote by one rotation `r` (`r v`)
    rotates the poses by it and leaves the activations unchanged: routing
    is rotation-equivariant. Poses are returned with `w >= 0`. Routing
    runs in float32 under float16/bfloat16 policies.

    This router needs unit-quaternion votes (`QuaternionCapsule` makes
    them), so it has no short name for the vector-capsule layers'
    `router=`; pass the instance.

    Args:
        iterations: int, routing iterations, `>= 1`.
        closed_form: find the means' eigenvectors in closed form
            (`keras_capsules.small_eigen`) instead of `keras.ops.eigh`: under
            XLA (JAX, TensorFlow with `jit_compile=True`) 4-6x faster per
            step, but XLA takes several times longer to compile it; without
            XLA no faster. The results agree to float32 accuracy.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        votes: `(batch, in_caps, out_caps, 4)` unit quaternions.
        activations: `(batch, in_caps)` in `[0, 1]`, or `None` (ones).
        return_coefficients: also return `w` of the last iteration.

    Returns:
        `(poses (batch, out_caps, 4), activations (batch, out_caps))`; then
        `w` `(batch, in_caps, out_caps)` with `return_coefficients=True`.

    Example:

    >>> votes = np.zeros((2, 6, 3, 4), "float32")
    >>> votes[..., 0] = 1.0  # every child votes for the identity
    >>> poses, activations = keras_capsules.routing.QuaternionRouting()(votes)
    >>> ops.convert_to_numpy(poses)[0, 0].round(4) + 0, tuple(activations.shape)
    (array([1., 0., 0., 0.], dtype=float32), (2, 3))

    Reference: Zhao, Birdal, Lenssen, Menegatti, Guibas & Tombari,
    "Quaternion Equivariant Capsule Networks for 3D Point Clouds", ECCV
    2020.
    """

    pose_kinds = ("quaternion",)
    pose_length = "kept"  # unit quaternions: rotations, not lengths

    def __init__(self, iterations=3, closed_form=False, **kwargs):
        super().__init__(**kwargs)
        self.closed_form = bool(closed_form)
        self.iterations = positive_int(iterations, "iterations")

    def build(self, votes_shape, activations_shape=None):
        super().build(votes_shape, activations_shape)
        if votes_shape[-1] != 4:
            raise ValueError(
                "QuaternionRouting routes unit quaternions: votes must be "
                "(batch, in_caps, out_caps, 4). "
                f"Received: votes.shape={tuple(votes_shape)}"
            )
        self.alpha = self.add_weight(name="alpha", shape=(), initializer="ones")
        self.beta = self.add_weight(name="beta", shape=(), initializer="ones")

    def route(self, votes, activations):
        if activations is None:
            activations = ops.ones(ops.shape(votes)[:2], dtype=votes.dtype)
        a = activations[:, :, None]
        # (batch, out, in, 4): the children of each parent on one axis.
        parent_major = ops.transpose(votes, (0, 2, 1, 3))
        stopped = ops.stop_gradient(parent_major)
        c = ops.broadcast_to(a, ops.shape(votes)[:3])
        for iteration in range(self.iterations):
            last = iteration == self.iterations - 1
            v = parent_major if last else stopped
            weights = c / (ops.sum(c, axis=1, keepdims=True) + 1e-7)
            poses = quaternion.weighted_mean(
                v, ops.transpose(weights, (0, 2, 1)), closed_form=self.closed_form
            )
            if not last:
                distance = quaternion.angular_distance(poses[:, :, None], stopped)
                c = c * a * (1.0 - ops.transpose(distance, (0, 2, 1)))
        agreement = 1.0 - ops.transpose(
            quaternion.angular_distance(poses[:, :, None], parent_major), (0, 2, 1)
        )
        # NaN votes count as voting: their parent's activation is NaN, not
        # 0 (`c > 0` is False for NaN; compilers fold NaN * 0 and not(<=)).
        voting = ops.cast(ops.logical_or(c > 0, ops.isnan(c)), votes.dtype)
        count = ops.sum(voting, axis=1)
        mean_agreement = ops.sum(c * agreement, axis=1) / ops.maximum(count, 1.0)
        alpha = ops.cast(self.alpha, votes.dtype)
        beta = ops.cast(self.beta, votes.dtype)
        out_activations = ops.sigmoid(alpha * mean_agreement + beta - 1.0)
        out_activations = ops.where(count > 0, out_activations, ops.zeros_like(out_activations))
        return poses, out_activations, weights

    def get_config(self):
        config = super().get_config()
        config.update(iterations=self.iterations, closed_form=self.closed_form)
        return config
