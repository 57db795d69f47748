"""`QuaternionCapsule`: rotation-equivariant capsules over point
neighbourhoods (Zhao et al., 2020)."""

import keras
from keras import ops

from keras_capsules import quaternion
from keras_capsules.layers.base_routed_capsule import RoutedCapsule
from keras_capsules.ops import compute_dtype_for, safe_norm
from keras_capsules.routing.quaternion import QuaternionRouting
from keras_capsules.validation import built_input_spec, non_empty


@keras.saving.register_keras_serializable(package="keras_capsules")
class QuaternionCapsule(RoutedCapsule):
    """Capsules whose poses are rotations, routed within point patches.

    Each of `patches` patches holds `neighbors` points; each point carries
    `in_caps` capsules: a pose `q` (unit quaternion) and an activation `a`.
    For each patch and input type `i`, with `offsets` the points' positions
    relative to the patch:

    ```
    m_i = weighted_mean_k(q[k, i], a[k, i])                 the type's mean rotation
    x[k] = concat_i rotate(conj(m_i), offsets[k])            offsets in those frames
    t[k, i, j] = normalize((x[k] W1 + b1) W2 + b2)[i, j]     a rotation per child and parent
    votes[k, i, j] = q[k, i] t[k, i, j]                      Hamilton product
    poses[j], activations[j] = QuaternionRouting over the neighbors * in_caps children
    ```

    `W1: (3 in_caps, num_capsules)`, `W2: (num_capsules, in_caps
    num_capsules 4)`: the authors' linear bottleneck. Rotating the cloud by
    `r` turns every input pose `q` into `r q` and every offset `o` into
    `R(r) o`: the means become `r m_i`, the offsets `x` do not change, so
    the transforms `t` do not either, the votes become `r q t`, and routing
    (`QuaternionRouting`) returns the poses `r pose` with unchanged
    activations. The layer is rotation-equivariant; translations do not
    reach it (offsets are relative).

    Quaternion products, means and distances run in float32 under
    float16/bfloat16 policies.

    Args:
        num_capsules: int, output capsule types per patch.
        router: a router of quaternion poses (`Router.pose_kinds`), or its
            config: a `routing.QuaternionRouting`; default
            `QuaternionRouting(iterations=3)`.
        kernel_initializer: of `W1` and `W2`.
        **kwargs: base layer arguments (`name`, `dtype`).

    Call arguments:
        inputs: `[offsets, poses, activations]`: `(batch, patches,
            neighbors, 3)`, `(batch, patches, neighbors, in_caps, 4)` unit
            quaternions and `(batch, patches, neighbors, in_caps)` in
            `[0, 1]` (0 drops a capsule, e.g. a padded point).
        return_coefficients: also return the routing weights, `(batch,
            patches, neighbors * in_caps, num_capsules)`.

    Returns:
        `[poses, activations]`: `(batch, patches, num_capsules, 4)` with
        `w >= 0`, and `(batch, patches, num_capsules)` in `(0, 1)`.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> offsets = rng.normal(size=(2, 5, 8, 3)).astype("float32")
    >>> poses = rng.normal(size=(2, 5, 8, 1, 4)).astype("float32")
    >>> poses /= np.linalg.norm(poses, axis=-1, keepdims=True)
    >>> layer = keras_capsules.layers.QuaternionCapsule(6)
    >>> out_poses, out_activations = layer([offsets, poses, np.ones((2, 5, 8, 1), "float32")])
    >>> tuple(out_poses.shape), tuple(out_activations.shape)
    ((2, 5, 6, 4), (2, 5, 6))

    Reference: Zhao, Birdal, Lenssen, Menegatti, Guibas & Tombari,
    "Quaternion Equivariant Capsule Networks for 3D Point Clouds", ECCV
    2020.
    """

    length_coded = False  # poses are rotations, activations separate
    pose_kind = "quaternion"
    router_activations = "probabilities"

    def __init__(self, num_capsules, router=None, kernel_initializer="glorot_uniform", **kwargs):
        if router is None:
            router = QuaternionRouting(dtype=kwargs.get("dtype"))
        super().__init__(num_capsules, router=router, **kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def _check(self, input_shape):
        if not isinstance(input_shape, (list, tuple)) or len(input_shape) != 3:
            raise ValueError(
                "QuaternionCapsule expects inputs [offsets, poses, activations]. "
                f"Received: input_shape={input_shape}"
            )
        offsets, poses, activations = (tuple(s) for s in input_shape)
        if len(offsets) != 4 or offsets[-1] != 3:
            raise ValueError(
                "QuaternionCapsule expects offsets of shape (batch, patches, neighbors, 3). "
                f"Received: offsets.shape={offsets}"
            )
        if len(poses) != 5 or poses[-1] != 4 or poses[1:3] != offsets[1:3]:
            raise ValueError(
                "QuaternionCapsule expects poses of shape (batch, patches, neighbors, "
                f"in_caps, 4) with patches, neighbors = {offsets[1:3]} as in the offsets. "
                f"Received: poses.shape={poses}"
            )
        if activations != poses[:4]:
            raise ValueError(
                f"QuaternionCapsule expects activations of shape {poses[:4]} "
                f"(the poses' without the last axis). Received: activations.shape={activations}"
            )
        if None in poses[1:]:
            raise ValueError(
                "QuaternionCapsule needs known patches, neighbors and in_caps. "
                f"Received: poses.shape={poses}"
            )
        non_empty(
            "QuaternionCapsule", "poses", poses, (1, 2, 3), ("patch", "neighbor", "in_caps type")
        )
        return poses[1:4]

    def build(self, input_shape):
        patches, neighbors, in_caps = self._check(input_shape)
        units = self.num_capsules
        # A built layer refuses another number of input capsule types.
        offsets_shape, poses_shape, activations_shape = (tuple(s) for s in input_shape)
        self.input_spec = [
            built_input_spec(offsets_shape, (-1,)),
            built_input_spec(poses_shape, (-2, -1)),
            built_input_spec(activations_shape, (-1,)),
        ]
        self.kernel_1 = self.add_weight(
            name="kernel_1", shape=(3 * in_caps, units), initializer=self.kernel_initializer
        )
        self.bias_1 = self.add_weight(name="bias_1", shape=(units,), initializer="zeros")
        self.kernel_2 = self.add_weight(
            name="kernel_2",
            shape=(units, in_caps * units * 4),
            initializer=self.kernel_initializer,
        )
        self.bias_2 = self.add_weight(
            name="bias_2", shape=(in_caps * units * 4,), initializer="zeros"
        )
        self.build_router((None, neighbors * in_caps, units, 4), (None, neighbors * in_caps))
        self.built = True

    def call(self, inputs, return_coefficients=False):
        patches, neighbors, in_caps = self._check([tuple(t.shape) for t in inputs])
        dtype = compute_dtype_for(self.compute_dtype)
        offsets, poses, activations = (ops.cast(t, dtype) for t in inputs)
        # Each type's mean rotation over the patch: (batch, patches, in, 4).
        means = quaternion.weighted_mean(
            ops.transpose(poses, (0, 1, 3, 2, 4)),
            ops.transpose(activations, (0, 1, 3, 2)),
            closed_form=getattr(self.router, "closed_form", False),  # as its router's
        )
        # The offsets seen from each type's mean frame: rotation-invariant.
        local = quaternion.rotate(quaternion.conjugate(means)[:, :, None], offsets[:, :, :, None])
        features = ops.reshape(local, (-1, patches, neighbors, 3 * in_caps))
        hidden = ops.matmul(features, ops.cast(self.kernel_1, dtype)) + ops.cast(self.bias_1, dtype)
        transforms = ops.matmul(hidden, ops.cast(self.kernel_2, dtype))
        transforms = transforms + ops.cast(self.bias_2, dtype)
        transforms = ops.reshape(
            transforms, (-1, patches, neighbors, in_caps, self.num_capsules, 4)
        )
        transforms = transforms / safe_norm(transforms, keepdims=True, epsilon=1e-12)
        votes = quaternion.multiply(poses[:, :, :, :, None], transforms)
        children = neighbors * in_caps
        outputs = self.route(
            ops.reshape(votes, (-1, children, self.num_capsules, 4)),
            ops.reshape(activations, (-1, children)),
            return_coefficients=return_coefficients,
        )
        poses = ops.reshape(outputs[0], (-1, patches, self.num_capsules, 4))
        activations = ops.reshape(outputs[1], (-1, patches, self.num_capsules))
        if return_coefficients:
            coefficients = ops.reshape(outputs[2], (-1, patches, children, self.num_capsules))
            return [poses, activations], coefficients
        return [poses, activations]

    def compute_output_shape(self, input_shape):
        self._check(input_shape)
        batch, patches = tuple(input_shape[1])[:2]
        return [(batch, patches, self.num_capsules, 4), (batch, patches, self.num_capsules)]

    def compute_coefficients_shape(self, input_shape):
        batch, patches, neighbors, in_caps, _ = tuple(input_shape[1])
        return (batch, patches, neighbors * in_caps, self.num_capsules)

    def get_config(self):
        config = super().get_config()
        config.update(kernel_initializer=keras.initializers.serialize(self.kernel_initializer))
        return config
