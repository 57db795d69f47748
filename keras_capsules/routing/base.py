"""The contract every router follows."""

import keras
from keras import ops

from keras_capsules.ops import compute_dtype_for
from keras_capsules.validation import check_activations_shape


class Router(keras.layers.Layer):
    """Base class of routing algorithms.

    A router turns the votes of child capsules for their parents into parent
    poses and activations:

    ```
    poses, activations = router(votes, activations=None)
    poses, activations, coefficients = router(
        votes, activations, return_coefficients=True)
    ```

    - `votes`: `(batch, in_caps, out_caps, dim)`, the prediction of child
      `i` for parent `j`.
    - `activations` (optional input): `(batch, in_caps)`; routers that do
      not use child activations accept and ignore them.
    - outputs: `poses (batch, out_caps, dim)`, `activations (batch,
      out_caps)` and, with `return_coefficients=True`, the coupling
      coefficients of the last iteration, `(batch, in_caps, out_caps)`.

    Routing runs in float32 under float16/bfloat16 policies (softmaxes and
    norms lose too much in half precision); outputs are cast back to the
    layer's compute dtype.

    Subclasses implement `route(votes, activations)`, which receives votes
    (and activations, or `None`) already in the routing dtype and returns
    `(poses, activations, coefficients)`. Routers with weights create them
    in `build(votes_shape, activations_shape=None)` and list in
    `weight_axes` the votes axes (1: in_caps, 2: out_caps, 3: dim) whose
    sizes the weights fix. They declare what they can do as class
    attributes, which the routed capsule layers check once, when they are
    made: the pose kinds they route (`pose_kinds`), whether their
    activations are logits (`logit_activations`), what their poses'
    lengths are (`fixed_length_poses`, `pose_length`), whether they take
    `share_weights` (`accepts_share_weights`) and what else `call` can
    return (`extra_outputs`). A router module gives its class a short name
    with `@keras_capsules.routing.registry.register("name")`.

    Reuse: a router without such axes (`DynamicRouting`,
    `SparseAttentionRouting`) may route votes of any size after it is
    built, so one instance can serve several capsule layers. A router
    with weights is built for one size: called with other votes (or
    given to a second capsule layer of another size) it raises a
    `ValueError` naming the size it was built for; give each layer its
    own router.

    Shapes are checked when the router is built and on every call, before
    any computation: votes must be `(batch, in_caps, out_caps, dim)` and
    activations `(batch, in_caps)`.

    A router is built by the capsule layer that owns it, for the votes
    that layer makes, so its config holds no build config
    (`get_build_config` returns `None`): a layer restored from a `.keras`
    file builds its router again, then the file's weights are loaded.

    Args:
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        votes: `(batch, in_caps, out_caps, dim)`.
        activations: optional `(batch, in_caps)`.
        return_coefficients: also return the coupling coefficients.

    Returns:
        `(poses (batch, out_caps, dim), activations (batch, out_caps))`,
        and the coefficients `(batch, in_caps, out_caps)` with
        `return_coefficients=True`, in the layer's compute dtype.

    Example (a router that averages the votes):

    >>> class MeanRouting(keras_capsules.routing.Router):
    ...     def route(self, votes, activations):
    ...         poses = ops.mean(votes, axis=1)
    ...         coefficients = ops.ones_like(votes[..., 0]) / votes.shape[2]
    ...         return poses, keras_capsules.ops.safe_norm(poses), coefficients
    >>> poses, lengths = MeanRouting()(ops.ones((2, 6, 3, 4)))
    >>> tuple(poses.shape), ops.convert_to_numpy(lengths).round(3)[0]
    ((2, 3, 4), array([2., 2., 2.], dtype=float32))
    """

    # Votes axes whose sizes the router's weights fix (see the docstring).
    weight_axes = ()

    # What the router can do, declared once per class; the routed capsule
    # layers compare it with what they need when they are made
    # (`keras_capsules.layers.RoutedCapsule`), so no layer probes a router.

    #: The kinds of poses the router routes: `"vector"` (votes are vectors),
    #: `"matrix"` (flattened pose matrices: a router that treats votes as
    #: vectors routes them too), `"quaternion"` (unit quaternions, whose
    #: mean is a rotation: `QuaternionRouting` only).
    pose_kinds = ("vector", "matrix")
    #: Whether the router's poses have a fixed length (a layer norm's), so
    #: that their length says nothing of the parent.
    fixed_length_poses = False
    #: Whether the router's activations are logits (scores in (-inf, inf))
    #: rather than probabilities in [0, 1].
    logit_activations = False
    #: What a pose's length is, for the vector-capsule layers
    #: (`RoutedCapsule.length_coded`), which make it the parent's activation:
    #: `"activation"`, it is already (the routers that squash their poses
    #: and return their lengths); `"rescaled"`, it says nothing of the parent
    #: (poses of a fixed length, weighted means of the votes, logit
    #: activations), so the layers rescale the poses to the length of the
    #: activations (`sigmoid` of logits); `"kept"`, the poses are the
    #: router's own estimates and the layers return them as they are, beside
    #: the activations (EM's Gaussian means, self-routing's weighted means):
    #: the contract's exceptions, whose `Length` is no probability.
    pose_length = "activation"
    #: Whether the router takes a `share_weights` argument: one set of
    #: routing weights per parent for every child, as a capsule layer with
    #: shared transforms has (`HeinsenRouting`).
    accepts_share_weights = False
    #: Outputs `call` gives beyond the coefficients, each asked for with
    #: `return_<name>=True` and returned in this order after them
    #: (`HeinsenRouting`: `("variances",)`).
    extra_outputs = ()
    #: How a parent's start grows with the number of coherent children
    #: (`vote_stddev(..., coherent=True)` falls as `children **
    #: -coherent_children_exponent`): 1 for the routers whose parents sum
    #: the votes, 0 for those whose parents average them (`EMRouting`,
    #: `SelfRouting`, `HeinsenRouting`, `CrossAttentionRouting`). A layer
    #: with shared transforms whose number of children is unknown until it
    #: is called (`Capsule(share_weights=True)` on `Input((None, dim))`)
    #: scales the votes of each sample by `(parents ** 2 / children) **
    #: coherent_children_exponent`, its present children counted, so its
    #: parents start near the squash's knee for a set of any size.
    coherent_children_exponent = 1.0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Votes reach `call` in their own dtype (not cast down to a half
        # compute dtype first) and router weights are read in float32.
        self.autocast = False

    def add_weight(self, *args, **kwargs):
        # Inside a mixed-precision model the model's autocast scope casts
        # every variable read to float16, `self.autocast = False` does not
        # undo that; a variable made with `autocast=False` is read in
        # float32. Router weights take part in float32 routing, and their
        # gradients overflow float16 (~1e6 on votes of size 1e4).
        kwargs.setdefault("autocast", False)
        return super().add_weight(*args, **kwargs)

    def build(self, votes_shape, activations_shape=None):
        self.check_inputs(votes_shape, activations_shape)
        self.built_votes_shape = tuple(votes_shape)
        self.built = True

    def check_inputs(self, votes_shape, activations_shape=None):
        """Raises a `ValueError` unless votes of `votes_shape` (and
        activations of `activations_shape`, if not `None`) fit this router:
        their ranks, the activations against the votes, and, once built,
        the sizes its weights were made for."""
        name = self.__class__.__name__
        check_votes_shape(votes_shape, name)
        votes_shape = tuple(votes_shape)
        check_activations_shape(name, "votes", votes_shape, activations_shape)
        built_shape = getattr(self, "built_votes_shape", None)
        if self.built and built_shape is not None:
            names = {1: "in_caps", 2: "out_caps", 3: "dim"}
            for axis in self.weight_axes:
                if None not in (built_shape[axis], votes_shape[axis]) and (
                    built_shape[axis] != votes_shape[axis]
                ):
                    raise ValueError(
                        f"{name} '{self.name}' was built for votes with "
                        f"{names[axis]}={built_shape[axis]} (its weights have that "
                        f"size) and cannot route votes with {names[axis]}="
                        f"{votes_shape[axis]}. Received: votes.shape={votes_shape}. "
                        "Give each capsule layer its own router."
                    )

    def vote_stddev(self, children, parents, dim, coherent=False):
        """The standard deviation the votes' elements should start with.

        The capsule layers' default transforms are drawn so that their
        votes start with it (`keras_capsules.initializers`). The default
        suits routers whose parents sum the votes with coefficients that
        add to 1 over the parents (`~1 / parents` at initialisation), so
        that a parent's sum starts at length ~1, the squash's knee. How
        long a sum of `children` votes is depends on whether they point in
        independent directions or in one:

        ```
        independent (coherent=False):  vote_stddev = parents / sqrt(children * dim)
        coherent    (coherent=True):   vote_stddev = parents / (children * sqrt(dim))
        ```

        Votes through one transform per child and parent are independent
        whatever the children are (the transforms are drawn
        independently). Votes through a transform shared by all children
        (`Capsule(share_weights=True)`) are as alike as the children:
        tokens of a transformer (layer-normalised, sharing a mean
        direction) and the capsules of one type (their bias is shared)
        point mostly one way, and independent-case votes of 64 such
        children sum to length ~8, where the squash passes back almost no
        gradient (measured: shared-transform class capsules started at
        length 0.98 and dynamic routing stayed at chance). The coherent
        case errs the other way for independent children, starting their
        sum at `1 / sqrt(children)`, where the squash's slope falls only
        linearly (`2 |s|`), not as `|s|^-3`; the shared-transform layers
        take it.

        Routers that average the votes instead override it (`EMRouting`,
        `SelfRouting`, `HeinsenRouting`).

        Args:
            children: the number of child capsules that vote for each
                parent (`in_caps`; `None` if unknown: then taken as
                `parents ** 2`).
            parents: the number of parents, `out_caps`.
            dim: the dimension of the votes.
            coherent: whether the votes of different children point in one
                direction (see above).

        Returns:
            a float.

        Example:

        >>> router = keras_capsules.routing.DynamicRouting()
        >>> round(router.vote_stddev(1152, 10, 16), 4)
        0.0737
        >>> round(router.vote_stddev(64, 4, 16, coherent=True), 4)
        0.0156
        """
        children = parents**2 if children is None else children
        if coherent:
            return parents / (children * dim**0.5)
        return parents / (children * dim) ** 0.5

    def call(self, votes, activations=None, return_coefficients=False):
        return self.routed_outputs(votes, activations, (0, 1, 2) if return_coefficients else (0, 1))

    def routed_outputs(self, votes, activations, keep):
        """The outputs of `route` at the indices `keep`, in the layer's
        compute dtype: what `call` returns. Routers whose `route` returns
        more than `(poses, activations, coefficients)` (`HeinsenRouting`:
        the variances too) call it with the indices their call arguments
        ask for."""
        self.check_inputs(votes.shape, None if activations is None else activations.shape)
        dtype = compute_dtype_for(self.compute_dtype)
        votes = ops.cast(votes, dtype)
        if activations is not None:
            activations = ops.cast(activations, dtype)
        outputs = self.route(votes, activations)
        return tuple(ops.cast(outputs[k], self.compute_dtype) for k in keep)

    def get_build_config(self):
        # The capsule layer that owns the router builds it, for the votes it
        # computes (a router restored with a build config of its own would
        # be built twice, its weights added twice).
        return None

    def route(self, votes, activations):
        raise NotImplementedError(
            f"{self.__class__.__name__} must implement `route(votes, activations)`."
        )

    def compute_output_shape(self, votes_shape, activations_shape=None, return_coefficients=False):
        self.check_inputs(votes_shape, activations_shape)
        batch, in_caps, out_caps, dim = votes_shape
        shapes = ((batch, out_caps, dim), (batch, out_caps))
        if return_coefficients:
            shapes += ((batch, in_caps, out_caps),)
        return shapes

    def compute_output_spec(self, votes, activations=None, return_coefficients=False):
        shapes = self.compute_output_shape(
            votes.shape,
            None if activations is None else activations.shape,
            return_coefficients,
        )
        return tuple(keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes)


def describe(router):
    """A router as its class name and its scalar config, for messages:
    `DynamicRouting(iterations=3, ...)` (the layer arguments `name`,
    `trainable` and `dtype` and the non-scalar entries, such as
    initializers, left out).

    Args:
        router: a `Router` (or any Keras layer).

    Returns:
        a string.

    Example:

    >>> from keras_capsules.routing.base import describe
    >>> describe(keras_capsules.routing.EMRouting(iterations=2))
    'EMRouting(iterations=2, final_lambda=1.0, inverse_temperature=None, epsilon=0.0001)'
    """
    config = router.get_config()
    arguments = ", ".join(
        f"{key}={value!r}"
        for key, value in config.items()
        if key not in ("name", "trainable", "dtype")
        and isinstance(value, (bool, int, float, str, type(None)))
    )
    return f"{type(router).__name__}({arguments})"


def check_votes_shape(votes_shape, name):
    """Raises a clear error unless `votes_shape` is `(batch, in, out, dim)`.

    Args:
        votes_shape: a shape tuple.
        name: the router's class name, for the message.

    Example:

    >>> from keras_capsules.routing.base import check_votes_shape
    >>> check_votes_shape((2, 6, 3), "DynamicRouting")
    Traceback (most recent call last):
        ...
    ValueError: DynamicRouting expects votes of shape (batch, in_caps, out_caps, dim). ...
    """
    if len(votes_shape) != 4:
        raise ValueError(
            f"{name} expects votes of shape (batch, in_caps, out_caps, dim). "
            f"Received: votes.shape={tuple(votes_shape)}"
        )
