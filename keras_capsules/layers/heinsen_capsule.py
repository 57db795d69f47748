"""Capsules of matrix poses and scores routed by Heinsen routing (Heinsen, 2019)."""

import keras
from keras import ops

from keras_capsules.layers._children_spec import children_spec
from keras_capsules.layers.base_routed_capsule import RoutedCapsule, split_capsule_inputs
from keras_capsules.ops import compute_dtype_for
from keras_capsules.validation import boolean, check_activations_shape, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class HeinsenCapsule(RoutedCapsule):
    """A layer of Heinsen's capsules: `d_cov x d_out` matrix poses and a
    score (a logit) per capsule, fed by every capsule below.

    Each child `i`, a `d_cov x d_inp` matrix `mu_inp[b, i]` with score
    `a_inp[b, i]`, votes for each parent `j` with an affine map, then
    `HeinsenRouting` routes the flattened votes:

    ```
    V[b, i, j] = mu_inp[b, i] @ W[i, j] + B[i, j]     # (d_cov, d_out)
    mu, a_out, sig2 = router(V, a_inp)     # HeinsenRouting(iterations=3, epsilon=1e-5)
    ```

    `W: (in_caps, num_capsules, d_inp, capsule_dim)` and `B: (in_caps,
    num_capsules, d_cov, capsule_dim)`; with `share_weights=True` one `W`,
    `B` (and, with the default router, one `beta_use`, `beta_ign`) per
    parent serve every child, `W: (num_capsules, d_inp, capsule_dim)`, and
    any number of children is accepted (the author's `n_inp=-1`). `W`
    starts as `normal(0, 1) / d_inp`, `B` at zeros, as in the official
    code. Votes are computed in float32 under mixed precision, as the
    routing.

    Scores in and out are logits, so the router must take and give logits
    (`Router.logit_activations`), as `HeinsenRouting` does; the variances
    need a router that returns them (`Router.extra_outputs`, as
    `HeinsenRouting`'s `return_variances=True`). Another router raises a
    `ValueError` when the layer is made (`RoutedCapsule`).

    Args:
        num_capsules: int, number of parent capsules `n_out`.
        capsule_dim: int, `d_out`, the columns of each parent pose.
        router: a router with logit activations, or its name or config;
            default `HeinsenRouting(iterations=3, epsilon=1e-5,
            share_weights=share_weights)`, the author's.
        share_weights: bool, one `W`, `B` (and the default router's
            `beta_use`, `beta_ign`) per parent for all children.
        return_variances: bool, also return the variances `sig2`.
        kernel_initializer: initializer of `W`; `None`: `normal(0, 1 / d_inp)`.
        bias_initializer: initializer of `B`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `[poses, scores]`: child poses `(batch, in_caps, d_cov,
            d_inp)` and their scores, logits `(batch, in_caps)`; or the
            poses alone (every child then fully present).

    Returns:
        `(poses (batch, num_capsules, d_cov, capsule_dim), scores (batch,
        num_capsules))`, the scores being logits; with
        `return_variances=True`, the variances of the poses' elements,
        `(batch, num_capsules, d_cov, capsule_dim)`, third.

    Example (the class capsules of Heinsen's smallNORB model; the router's
    `beta_use` and `beta_ign` are its own weights):

    >>> layer = keras_capsules.layers.HeinsenCapsule(5, 4, return_variances=True)
    >>> poses, scores, variances = layer(
    ...     [keras.random.normal((2, 64, 4, 4)), keras.random.normal((2, 64))])
    >>> tuple(poses.shape), tuple(scores.shape), tuple(variances.shape)
    ((2, 5, 4, 4), (2, 5), (2, 5, 4, 4))
    >>> tuple(layer.kernel.shape), tuple(layer.bias.shape), tuple(layer.router.beta_use.shape)
    ((64, 5, 4, 4), (64, 5, 4, 4), (64, 5))

    Reference: Heinsen, "An Algorithm for Routing Capsules in All Domains",
    arXiv:1911.00792, 2019.
    """

    length_coded = False  # matrix poses and logit scores
    pose_kind = "matrix"
    router_activations = "logits"

    @property
    def required_router_outputs(self):
        return ("variances",) if self.return_variances else ()

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        router=None,
        share_weights=False,
        return_variances=False,
        kernel_initializer=None,
        bias_initializer="zeros",
        **kwargs,
    ):
        share_weights = boolean(share_weights, "share_weights")
        if router is None:  # the author's routing, sharing what the layer shares
            router = {"class_name": "heinsen", "config": {"share_weights": share_weights}}
        # Before the base's router check, which reads it.
        self.return_variances = boolean(return_variances, "return_variances")
        super().__init__(num_capsules, router, **kwargs)
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.share_weights = share_weights
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        poses_shape, scores_shape = split_capsule_inputs(input_shape)
        poses_shape = tuple(poses_shape)
        if len(poses_shape) != 4 or None in poses_shape[2:]:
            raise ValueError(
                "HeinsenCapsule expects poses of shape (batch, in_caps, d_cov, d_inp) "
                f"with known d_cov and d_inp. Received: poses.shape={poses_shape}"
            )
        batch, in_caps, d_cov, d_inp = poses_shape
        if in_caps is None and not self.share_weights:
            raise ValueError(
                "HeinsenCapsule needs a known in_caps unless share_weights=True. "
                f"Received: poses.shape={poses_shape}"
            )
        check_activations_shape("HeinsenCapsule", "poses", poses_shape, scores_shape)
        # A built layer refuses other sizes when called.
        self.input_spec = children_spec(poses_shape, scores_shape, self.share_weights)
        prefix = (self.num_capsules,) if self.share_weights else (in_caps, self.num_capsules)
        initializer = self.kernel_initializer or keras.initializers.RandomNormal(stddev=1.0 / d_inp)
        self.kernel = self.add_weight(
            name="kernel", shape=(*prefix, d_inp, self.capsule_dim), initializer=initializer
        )
        self.bias = self.add_weight(
            name="bias", shape=(*prefix, d_cov, self.capsule_dim), initializer=self.bias_initializer
        )
        votes_shape = (batch, in_caps, self.num_capsules, d_cov * self.capsule_dim)
        self.build_router(votes_shape, None if scores_shape is None else votes_shape[:2])

    def votes(self, poses):
        """The flattened votes `(batch, in_caps, num_capsules, d_cov *
        capsule_dim)` of poses `(batch, in_caps, d_cov, d_inp)`, in the
        routing dtype."""
        dtype = compute_dtype_for(self.compute_dtype)
        poses = ops.cast(poses, dtype)
        kernel, bias = ops.cast(self.kernel, dtype), ops.cast(self.bias, dtype)
        equation = "bicd,jde->bijce" if self.share_weights else "bicd,ijde->bijce"
        votes = ops.einsum(equation, poses, kernel) + bias
        batch, in_caps = ops.shape(poses)[0], ops.shape(poses)[1]
        return ops.reshape(votes, (batch, in_caps, self.num_capsules, -1))

    def call(self, inputs, return_coefficients=False):
        poses, scores = split_capsule_inputs(inputs)
        if scores is not None:
            check_activations_shape("HeinsenCapsule", "poses", poses.shape, scores.shape)
        d_cov = poses.shape[2]
        variances = {"return_variances": True} if self.return_variances else {}
        outputs = list(
            self.route(
                self.votes(poses), scores, return_coefficients=return_coefficients, **variances
            )
        )
        coefficients = outputs.pop(2) if return_coefficients else None
        shape = (-1, self.num_capsules, d_cov, self.capsule_dim)
        # The poses (and variances) as matrices; the scores as they are.
        outputs = tuple(t if k == 1 else ops.reshape(t, shape) for k, t in enumerate(outputs))
        return (outputs, coefficients) if return_coefficients else outputs

    def compute_output_shape(self, input_shape):
        poses_shape, _ = split_capsule_inputs(input_shape)
        batch, d_cov = poses_shape[0], poses_shape[2]
        poses = (batch, self.num_capsules, d_cov, self.capsule_dim)
        shapes = (poses, (batch, self.num_capsules))
        return shapes + (poses,) if self.return_variances else shapes

    def compute_coefficients_shape(self, input_shape):
        poses_shape, _ = split_capsule_inputs(input_shape)
        return (poses_shape[0], poses_shape[1], self.num_capsules)

    def get_config(self):
        config = super().get_config()
        config.update(
            capsule_dim=self.capsule_dim,
            share_weights=self.share_weights,
            return_variances=self.return_variances,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config
