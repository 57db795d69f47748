"""`RoutedCapsule`: the base of every capsule layer that routes votes.

A routed capsule layer makes votes of its child capsules for its parents
and hands them to a router (`keras_capsules.routing`). What differs between
the layers is how the votes are made (one transform per child and parent,
per window offset, a convolution, an affine map of matrices); what is the
same is written here once: the `router=` argument, building the router for
the votes the layer makes, calling it, and saving it in the config.
"""

import keras
from keras import ops

from keras_capsules import routing
from keras_capsules.ops import safe_norm
from keras_capsules.routing.base import describe
from keras_capsules.validation import positive_int


def split_capsule_inputs(inputs):
    """`poses` or `[poses, activations]` (tensors or shapes) -> the pair,
    `activations` being `None` when the inputs are the poses alone.

    Example:

    >>> from keras_capsules.layers.base_routed_capsule import split_capsule_inputs
    >>> split_capsule_inputs([(None, 8, 4), (None, 8)])
    ((None, 8, 4), (None, 8))
    >>> split_capsule_inputs((None, 8, 4))
    ((None, 8, 4), None)
    """
    if (
        isinstance(inputs, (list, tuple))
        and len(inputs) == 2
        and not isinstance(inputs[0], (int, type(None)))
    ):
        return inputs[0], inputs[1]
    return inputs, None


# The logit given to the children a mask drops (and, when the router had no
# activations, to those it keeps) for routers whose activations are logits:
# sigmoid(-/+ 1e4) is exactly 0 / 1 in float32.
_MASK_LOGIT = 1e4


def masked_children(poses, activations, mask, logit_activations=False):
    """Children that a Keras mask `(batch, in_caps)` (`True` = keep) drops
    take no part in routing: their poses become 0 (so their votes are 0,
    which the routers that ignore activations sum as nothing) and their
    activations 0 (a large negative logit for routers whose activations are
    logits), so that the routers that weigh children by activation give
    them no weight. Returns `(poses, activations)`.

    Example:

    >>> from keras_capsules.layers.base_routed_capsule import masked_children
    >>> mask = ops.convert_to_tensor([[True, True, False]])
    >>> poses, a = masked_children(ops.ones((1, 3, 2)), None, mask)
    >>> ops.convert_to_numpy(a)
    array([[1., 1., 0.]], dtype=float32)
    """
    keep = ops.cast(mask, poses.dtype)
    poses = poses * keep[..., None]
    if logit_activations:
        kept = ops.full_like(keep, _MASK_LOGIT) if activations is None else activations
        return poses, ops.where(ops.cast(mask, "bool"), kept, -_MASK_LOGIT)
    return poses, keep if activations is None else activations * ops.cast(keep, activations.dtype)


class RoutedCapsule(keras.layers.Layer):
    """Base of the capsule layers that route their children's votes.

    A subclass makes the votes `(batch, in_caps, num_capsules, dim)` of its
    children (`in_caps` children per routing, e.g. one window's) and
    routes them with `self.route(votes, activations)`; this base does the
    rest:

    - `router=`: a router, its name (`"dynamic"`, `"em"`, ...) or its
      config (`keras_capsules.routing.get`); `None` takes the class's
      `default_router`, a name or config. A name, or a short config that
      sets no `dtype`, gets the layer's dtype policy (the router still
      routes in float32 under mixed precision).
    - The router's fit, checked once, when the layer is made: the layer
      declares what it needs and the router what it can do (its class
      attributes, `keras_capsules.routing.Router`), and a router that does
      not fit raises a `ValueError` naming both. The layer's `pose_kind`
      (`"vector"`, `"matrix"`, `"quaternion"`) must be one the router
      routes (`Router.pose_kinds`); its `router_activations`
      (`"probabilities"`, `"logits"` or `None`: either, as the
      vector-capsule layers turn logits into probabilities) must match
      the router's (`Router.logit_activations`); and the outputs it asks
      of the router beyond the coefficients (`required_router_outputs`,
      e.g. `("variances",)`) must be ones it gives (`Router.extra_outputs`).
    - `build_router(votes_shape, activations_shape)`, called from the
      subclass's `build`: builds the router for the votes the layer makes;
      a router that is already built (shared by layers, or reused) is
      checked instead, so that a size its weights do not fit fails at build
      time.
    - `route(votes, activations)`: the router's poses and activations (and
      whatever else its call arguments ask for), in the layer's compute
      dtype. The length contract, stated here once: with `length_coded =
      True` (vector capsules, the default) a pose's length is its parent's
      activation, so `Length()` of the poses gives scores in [0, 1], for
      every router but EM and self-routing (`Router.pose_length`). The
      routers that squash make it so (dynamic, self-attention, sparse
      attention, cross-attention); the poses of inverted dot-product
      routing (of a fixed length) and Heinsen routing are rescaled to the
      length of their activations (`pose_length = "rescaled"`), and
      activations that are logits (`Router.logit_activations`) become
      `sigmoid(activations)` first. The exceptions (`pose_length =
      "kept"`) return their poses as they are: EM's Gaussian means and
      self-routing's weighted means of the votes, whose lengths say
      nothing of the parent and can pass 1; their activations, the
      parents' probabilities, come beside them (`return_activations=True`
      of the vector layers).
    - `get_config`: `num_capsules` and the router's config (which holds no
      build config: the layer builds its router, see `Router`).
    - `return_coefficients=True` in `__call__` (every routed layer, like
      `keras.layers.MultiHeadAttention(return_attention_scores=True)`): the
      layer returns `(outputs, coefficients)`, its usual outputs and the
      router's coefficients of the last iteration, of the shape
      `compute_coefficients_shape(input_shape)` gives; symbolic calls (a
      second output of a functional model) get it from
      `compute_output_spec`. What the coefficients mean depends on the
      router: see `docs/routing.md` ("Routing coefficients").

    Args:
        num_capsules: int, the number of parent capsules (parent capsule
            types, for the layers that route per position).
        router: the router, its name or config; `None`: `default_router`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: the child capsules, as the subclass defines them (poses,
            or `[poses, activations]`).

    Returns:
        the parent capsules, as the subclass defines them; `route` gives
        the router's `(poses, activations, ...)` in the compute dtype.

    Example (a layer of the mean of its children's poses, routed):

    >>> class Echo(keras_capsules.layers.RoutedCapsule):
    ...     def build(self, input_shape):
    ...         batch, in_caps, dim = input_shape
    ...         self.build_router((batch, in_caps, self.num_capsules, dim), None)
    ...     def call(self, poses):
    ...         votes = ops.repeat(poses[:, :, None], self.num_capsules, axis=2)
    ...         return self.route(votes, None)[0]
    ...     def compute_output_shape(self, input_shape):
    ...         return (input_shape[0], self.num_capsules, input_shape[2])
    >>> layer = Echo(3, router="dynamic")
    >>> tuple(layer(np.ones((2, 5, 4), "float32")).shape), type(layer.router).__name__
    ((2, 3, 4), 'DynamicRouting')

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (votes of children routed to parents).
    """

    #: The router of `router=None`: a router name or config.
    default_router = "dynamic"
    #: Vector capsules: a parent pose's length is its activation.
    length_coded = True
    #: The kind of the poses the layer routes (`Router.pose_kinds`).
    pose_kind = "vector"
    #: The activations the router must give: `"probabilities"`, `"logits"`,
    #: or `None` (either: the vector-capsule layers, `length_coded`, turn
    #: logits into probabilities).
    router_activations = None
    #: The outputs the layer asks of its router beyond the coefficients
    #: (`Router.extra_outputs`); a property where an argument decides.
    required_router_outputs = ()

    def __init__(self, num_capsules, router=None, **kwargs):
        super().__init__(**kwargs)
        self.num_capsules = positive_int(num_capsules, "num_capsules")
        self.router = self._router_from(self.default_router if router is None else router)
        self._check_router()

    def _check_router(self):
        """Raises a `ValueError` naming the layer and the router unless the
        router can do what the layer needs (see the class docstring)."""
        router, name = self.router, type(self).__name__
        received = f"Received: router={describe(router)}"
        if self.pose_kind not in router.pose_kinds:
            raise ValueError(
                f"{name} routes {self.pose_kind} poses; {type(router).__name__} routes "
                f"{' and '.join(router.pose_kinds)} poses only. {received}"
            )
        activations = "logits" if router.logit_activations else "probabilities"
        if self.router_activations not in (None, activations):
            raise ValueError(
                f"{name}'s activations are {self.router_activations}, so its router must "
                f"give {self.router_activations}; {type(router).__name__} gives "
                f"{activations} (`logit_activations`). {received}"
            )
        for output in self.required_router_outputs:
            if output not in router.extra_outputs:
                raise ValueError(
                    f"{name} needs a router that returns its {output} "
                    f"(`return_{output}=True`), which {type(router).__name__} does not. "
                    f"{received}"
                )

    def _router_from(self, router):
        # A name, or a short config (`{"class_name": "em", "config": {...}}`,
        # not one `routing.serialize` wrote), takes the layer's policy.
        policy = keras.dtype_policies.serialize(self.dtype_policy)
        if isinstance(router, str):
            router = {"class_name": router, "config": {"dtype": policy}}
        elif isinstance(router, dict) and "registered_name" not in router:
            router = {**router, "config": {"dtype": policy, **(router.get("config") or {})}}
        return routing.get(router)

    def build_router(self, votes_shape, activations_shape=None):
        """Builds the router for votes of `votes_shape` (and activations of
        `activations_shape`, or `None`), or checks a router that is built."""
        if self.router.built:
            self.router.check_inputs(votes_shape, activations_shape)
        else:
            self.router.build(votes_shape, activations_shape)

    def route(self, votes, activations=None, **call_kwargs):
        """The router's outputs for `votes` (and `activations`), in the
        layer's compute dtype: `(poses, activations, ...)`.

        The router's `call` runs, not `Layer.__call__`: on torch Keras's
        `__call__` keeps its arguments in a reference cycle until Python's
        garbage collector runs, so the votes (often the step's largest
        tensor) would stay alive through the backward pass; the layer built
        the router, which casts the votes and reads its weights itself."""
        poses, activations, *rest = self.router.call(votes, activations, **call_kwargs)
        if self.length_coded and self.router.logit_activations:
            activations = ops.sigmoid(activations)
        if self.length_coded and self._rescales_poses():
            poses = poses * (activations / safe_norm(poses))[..., None]
        return tuple(ops.cast(t, self.compute_dtype) for t in (poses, activations, *rest))

    def _rescales_poses(self):
        # A router of another library that declares only `fixed_length_poses`
        # or `logit_activations` (as before `pose_length`) is rescaled too.
        router = self.router
        return (
            router.pose_length == "rescaled"
            or router.fixed_length_poses
            or router.logit_activations
        )

    def compute_coefficients_shape(self, input_shape):
        """The shape of the coefficients that `return_coefficients=True`
        returns for inputs of `input_shape`."""
        raise NotImplementedError(
            f"{self.__class__.__name__} must implement `compute_coefficients_shape`."
        )

    def compute_output_spec(self, *args, return_coefficients=False, **kwargs):
        outputs = super().compute_output_spec(*args, **kwargs)
        if not return_coefficients:
            return outputs
        inputs = args[0] if args else kwargs["inputs"]
        input_shape = keras.tree.map_structure(lambda t: tuple(t.shape), inputs)
        shape = self.compute_coefficients_shape(input_shape)
        return outputs, keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(num_capsules=self.num_capsules, router=routing.serialize(self.router))
        return config
