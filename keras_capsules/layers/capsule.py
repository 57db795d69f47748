"""Fully connected capsule layer: votes by learned transforms, then routing."""

import keras
from keras import ops

from keras_capsules.initializers import householder_initializer, transform_initializer
from keras_capsules.layers._children_spec import children_spec
from keras_capsules.layers.base_routed_capsule import (
    RoutedCapsule,
    masked_children,
    split_capsule_inputs,
)
from keras_capsules.ops import compute_dtype_for, householder_orthogonal
from keras_capsules.validation import (
    boolean,
    check_activations_shape,
    non_empty,
    positive_int,
)

# The number of children the shared transforms are drawn for when it is
# unknown at build; the votes are then scaled per sample by
# `(REFERENCE_CHILDREN / children) ** router.coherent_children_exponent`. The
# optimiser's steps on the transforms are the same as for a layer built for
# this many children: 512 (64 points of 8 capsules) learned clouds and padded
# token sequences alike, where 16 or 4,096 left one of them at chance.
REFERENCE_CHILDREN = 512


@keras.saving.register_keras_serializable(package="keras_capsules")
class Capsule(RoutedCapsule):
    """A layer of capsules fed by every capsule of the layer below.

    Each child `i` predicts each parent `j` with its own transform; a router
    turns the votes into parent poses (and activations):

    ```
    votes[b, i, j, :] = u[b, i, :] @ W[i, j]     # W: (in_caps, num_capsules, in_dim, capsule_dim)
    poses, activations = router(votes, a)
    ```

    With `share_weights=True` one transform per parent, `W: (num_capsules,
    in_dim, capsule_dim)`, serves every child (then `in_caps` may vary).
    Votes are one einsum.

    A parent pose's length is its activation for every router but EM and
    self-routing (the length contract, `RoutedCapsule`): the routers that
    squash make it so; inverted dot-product routing's poses, layer-normalised
    to a fixed length, are rescaled to the length of its activations;
    Heinsen routing's, whose activations are logits, to the length
    `sigmoid(a_out)`, which the layer returns as the activations. EM's and
    self-routing's poses are means of the votes, returned as they are with
    their activations beside them (`return_activations=True`); the default
    transforms start their lengths below 1, but training can take them
    past it. So `Length()` of the poses gives class scores in [0, 1] for
    `MarginLoss` with every router but those two.

    Initialisation: the default `W` (`kernel_initializer=None`) is a
    truncated normal of standard deviation `vote_stddev / 0.5`
    (`keras_capsules.initializers.INPUT_LENGTH`), with
    `vote_stddev = router.vote_stddev(in_caps, num_capsules, capsule_dim,
    coherent=share_weights)`: child poses of length 0.5 (squashed capsules
    near the squash's knee) then give votes whose elements have the
    standard deviation the router asks for. For routers that sum votes
    with coefficients adding to 1 over the parents (dynamic, attention,
    inverted dot-product) that is `num_capsules / sqrt(in_caps *
    capsule_dim)`, so the parents' sums start at length ~1 and the squashed
    parents at ~0.5 (sparse attention caps it, so that sparsemax starts
    near uniform). With `share_weights=True` the votes are as alike as the
    children, and children such as a transformer's tokens or one type's
    capsules point mostly one way, so their votes add up coherently: the
    transforms are then derived for that case, `num_capsules / (in_caps *
    sqrt(capsule_dim))` (`Router.vote_stddev`). EM asks for unit-variance
    votes, self-routing (which averages them) for `0.5 * sqrt(in_caps /
    capsule_dim)` (`keras_capsules.initializers`). Keras's
    `glorot_uniform`, with its fan-in of `in_caps * num_capsules * in_dim`,
    starts the parents of a CapsNet at length ~1e-4, where the squash
    passes back no gradient. With `orthogonal=True` the Householder vectors
    default to `glorot_uniform` (orthogonal transforms keep the children's
    lengths).

    Sets and sequences of any size: with `share_weights=True` and
    `in_caps` unknown at build (`Input((None, dim))`), `W` is drawn for
    `REFERENCE_CHILDREN = 512` children and each sample's votes are scaled
    by `(512 / n) ** e`, `n` its present children (the mask's count) and
    `e` the router's `coherent_children_exponent` (1 for routers whose
    parents sum the votes, 0 for those that average them), so the parents
    start near the squash's knee whatever the size of the set
    (`scale_unknown_children=False` leaves the votes as they are: files
    saved before 0.3.0 load that way).

    With `orthogonal=True` (OrthCaps) each transform is the top-left
    `in_dim x capsule_dim` block of a product of `n = max(in_dim,
    capsule_dim)` Householder reflections `I - 2 v v^T / (v^T v)` with
    trainable `v` (`keras_capsules.ops.householder_orthogonal`): its rows
    (or columns, when `in_dim > capsule_dim`) are exactly orthonormal at
    every step. The trainable weight is then `householder: (..., n, n)`
    instead of `kernel`, kept and read in float32 under mixed precision;
    `transforms()` returns `W`.

    Args:
        num_capsules: int, number of parent capsules `J`.
        capsule_dim: int, dimension of each parent capsule.
        router: a router, or its name or config (see
            `keras_capsules.routing.get`): `"dynamic"`, `"em"`, ...; default
            `DynamicRouting()` (3 iterations, as in the paper).
        share_weights: bool, one transform per parent shared by all children.
        orthogonal: bool, parametrise each transform as an orthogonal block.
        return_activations: bool, also return the parent activations.
        kernel_initializer: initializer of `W` (of the Householder vectors
            with `orthogonal=True`); `None`, the default, derives it from
            the router (see "Initialisation").
        kernel_regularizer: regularizer of `W` (of the Householder vectors
            with `orthogonal=True`), or `None`.
        kernel_constraint: constraint on `W` (on the Householder vectors
            with `orthogonal=True`), or `None`.
        scale_unknown_children: bool, scale the votes of shared transforms
            per sample by the number of children when that number is
            unknown at build (see "Sets and sequences of any size").
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: child poses `u` of shape `(batch, in_caps, in_dim)`, or
            `[poses, activations]` with activations `a` of shape
            `(batch, in_caps)`, passed to the router.
        mask: optional booleans `(batch, in_caps)`, `True` = keep; a Keras
            mask of the poses (from `SetPrimaryCapsule` on masked inputs)
            is used when not given. Dropped children take no part in
            routing: their poses and activations are set to 0 (a large
            negative logit for Heinsen routing), so a padded batch gives
            the parents of the unpadded children with every router but
            EM, which normalises its cost by the number of children, the
            dropped ones included.
        return_coefficients: also return the router's coefficients of
            the last iteration, `(batch, in_caps, num_capsules)`: child `i`
            to parent `j` (see `docs/routing.md`, "Routing coefficients").

    Returns:
        Parent poses of shape `(batch, num_capsules, capsule_dim)`; with
        `return_activations=True`, `(poses, activations)` with activations
        of shape `(batch, num_capsules)`; with `return_coefficients=True`,
        `(outputs, coefficients)`, `outputs` being the above.

    Example (the digit capsules of the paper, on 1152 primary capsules):

    >>> u = keras.Input((1152, 8))
    >>> keras_capsules.layers.Capsule(10, 16)(u).shape
    (None, 10, 16)
    >>> poses, activations = keras_capsules.layers.Capsule(10, 16, return_activations=True)(u)
    >>> activations.shape
    (None, 10)
    >>> poses, coefficients = keras_capsules.layers.Capsule(10, 16)(u, return_coefficients=True)
    >>> coefficients.shape
    (None, 1152, 10)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017; orthogonal transforms: Geng et al., "OrthCaps: An
    Orthogonal CapsNet with Sparse Attention Routing and Pruning", CVPR 2024.
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        router=None,
        share_weights=False,
        orthogonal=False,
        return_activations=False,
        kernel_initializer=None,
        kernel_regularizer=None,
        kernel_constraint=None,
        scale_unknown_children=True,
        **kwargs,
    ):
        super().__init__(num_capsules, router, **kwargs)
        self.scale_unknown_children = boolean(scale_unknown_children, "scale_unknown_children")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.share_weights = boolean(share_weights, "share_weights")
        self.orthogonal = boolean(orthogonal, "orthogonal")
        self.return_activations = boolean(return_activations, "return_activations")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def build(self, input_shape):
        poses_shape, activations_shape = split_capsule_inputs(input_shape)
        if len(poses_shape) != 3:
            raise ValueError(
                "Capsule expects poses of shape (batch, in_caps, in_dim). "
                f"Received: poses.shape={tuple(poses_shape)}"
            )
        batch, in_caps, in_dim = poses_shape
        if in_dim is None or (in_caps is None and not self.share_weights):
            raise ValueError(
                "Capsule needs a known in_dim, and a known in_caps unless "
                f"share_weights=True. Received: poses.shape={tuple(poses_shape)}"
            )
        check_activations_shape("Capsule", "poses", poses_shape, activations_shape)
        # Zero children divide by zero in the transforms' scale; zero
        # dimensions give votes of nothing.
        non_empty("Capsule", "poses", poses_shape, (1, 2), ("child capsule", "pose dimension"))
        # A built layer refuses other sizes (and in_caps unless shared) when called.
        self.input_spec = children_spec(poses_shape, activations_shape, self.share_weights)
        self.in_dim = in_dim
        self.scales_votes = self._scales_votes(in_caps)
        prefix = (self.num_capsules,) if self.share_weights else (in_caps, self.num_capsules)
        if self.orthogonal:
            n = max(in_dim, self.capsule_dim)
            # Not autocast: the reflections are computed in float32.
            self.householder = self.add_weight(
                name="householder",
                shape=(*prefix, n, n),
                autocast=False,
                initializer=self.kernel_initializer or householder_initializer(),
                regularizer=self.kernel_regularizer,
                constraint=self.kernel_constraint,
            )
        else:
            # One transform for all children: their votes are as alike as
            # they are (see `Router.vote_stddev`).
            vote_stddev = self.router.vote_stddev(
                REFERENCE_CHILDREN if self.scales_votes else in_caps,
                self.num_capsules,
                self.capsule_dim,
                coherent=self.share_weights,
            )
            self.kernel = self.add_weight(
                name="kernel",
                shape=(*prefix, in_dim, self.capsule_dim),
                initializer=self.kernel_initializer or transform_initializer(vote_stddev),
                regularizer=self.kernel_regularizer,
                constraint=self.kernel_constraint,
            )
        self.build_router((batch, in_caps, self.num_capsules, self.capsule_dim), activations_shape)

    def call(self, inputs, mask=None, return_coefficients=False):
        poses, activations = split_capsule_inputs(inputs)
        if activations is not None:  # a built layer may get other activations
            check_activations_shape("Capsule", "poses", poses.shape, activations.shape)
        if isinstance(mask, (list, tuple)):  # `[poses, activations]`: the poses' mask
            mask = mask[0]
        if mask is not None:
            poses, activations = masked_children(
                poses, activations, mask, self.router.logit_activations
            )
        votes = self.votes(poses)
        if self.scales_votes:
            votes = votes * self.children_scale(votes, mask)
        poses, activations, *coefficients = self.route(
            votes, activations, return_coefficients=return_coefficients
        )
        outputs = (poses, activations) if self.return_activations else poses
        return (outputs, coefficients[0]) if return_coefficients else outputs

    def votes(self, poses):
        """The votes `(batch, in_caps, num_capsules, capsule_dim)` of child
        poses `(batch, in_caps, in_dim)`: `poses[b, i] @ W[i, j]`, in the
        routing dtype (float32 under float16/bfloat16 policies: the router
        works in float32, and half-precision votes of large poses
        overflow)."""
        equation = "bid,jde->bije" if self.share_weights else "bid,ijde->bije"
        dtype = compute_dtype_for(self.compute_dtype)
        return ops.einsum(equation, ops.cast(poses, dtype), ops.cast(self.transforms(), dtype))

    def _scales_votes(self, in_caps):
        return bool(
            self.share_weights
            and in_caps is None
            and self.scale_unknown_children
            and self.router.coherent_children_exponent
        )

    def children_scale(self, votes, mask=None):
        """`(REFERENCE_CHILDREN / n) ** router.coherent_children_exponent`
        per sample, `n` its present children (all of them without a mask):
        the factor on the votes of shared transforms whose number of
        children was unknown at build (see `scale_unknown_children`)."""
        n = ops.cast(ops.shape(votes)[1], votes.dtype)
        if mask is not None:
            n = ops.sum(ops.cast(mask, votes.dtype), axis=1)[:, None, None, None]
        scale = float(REFERENCE_CHILDREN) / ops.maximum(n, 1.0)
        return scale**self.router.coherent_children_exponent

    def transforms(self):
        """The transforms `W`, `(in_caps, num_capsules, in_dim, capsule_dim)`
        (no `in_caps` axis with `share_weights=True`)."""
        if self.orthogonal:
            w = householder_orthogonal(self.householder, self.in_dim, self.capsule_dim)
            return ops.cast(w, self.compute_dtype)
        return self.kernel

    def compute_coefficients_shape(self, input_shape):
        poses_shape, _ = split_capsule_inputs(input_shape)
        return (poses_shape[0], poses_shape[1], self.num_capsules)

    def compute_mask(self, inputs, mask=None):
        # The parents are all present, whichever children were masked.
        return None

    def compute_output_shape(self, input_shape):
        poses_shape, _ = split_capsule_inputs(input_shape)
        batch = poses_shape[0]
        poses = (batch, self.num_capsules, self.capsule_dim)
        return (poses, (batch, self.num_capsules)) if self.return_activations else poses

    @classmethod
    def from_config(cls, config):
        # Files saved before 0.3.0 summed unscaled votes: they keep their numbers.
        return super().from_config({"scale_unknown_children": False, **config})

    def get_config(self):
        config = super().get_config()
        config.update(
            capsule_dim=self.capsule_dim,
            share_weights=self.share_weights,
            orthogonal=self.orthogonal,
            return_activations=self.return_activations,
            scale_unknown_children=self.scale_unknown_children,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
        )
        return config
