"""Plumbing the capsule layers share: their inputs, shape checks, their
weights' initializer/regularizer/constraint arguments, and the router each
owns (resolved, built, called and stored in its config)."""

import keras
from keras import ops

from keras_capsules import routing
from keras_capsules.conv import window_output_shape
from keras_capsules.ops import safe_norm

POSE_SIZE = 16  # a 4x4 pose matrix, stored row-major


def householder_initializer():
    """The default initializer of Householder vectors (`orthogonal=True`):
    the transforms they make are orthogonal whatever their scale, so the
    votes keep the children's lengths and need no derived scale."""
    return keras.initializers.GlorotUniform()


# A weight argument's kind -> the Keras module that resolves and serialises it.
_WEIGHT_ARGUMENT_MODULES = {
    "initializer": keras.initializers,
    "regularizer": keras.regularizers,
    "constraint": keras.constraints,
}


def set_weight_arguments(layer, prefix, initializer, regularizer, constraint):
    """Sets `layer.<prefix>_initializer`, `_regularizer` and `_constraint`,
    resolved with `keras.initializers/regularizers/constraints.get` (as
    Keras's own layers do: a name, config dict, callable or `None`)."""
    values = (initializer, regularizer, constraint)
    for (kind, module), value in zip(_WEIGHT_ARGUMENT_MODULES.items(), values):
        setattr(layer, f"{prefix}_{kind}", module.get(value))


def weight_options(layer, prefix, default_initializer=None):
    """The `add_weight` arguments `initializer`, `regularizer` and
    `constraint` of the weights that `layer.<prefix>_*` govern; an
    initializer that is `None` (the layers' default) becomes
    `default_initializer()`, the layer's derived default
    (`keras_capsules.initializers`)."""
    options = {kind: getattr(layer, f"{prefix}_{kind}") for kind in _WEIGHT_ARGUMENT_MODULES}
    if options["initializer"] is None and default_initializer is not None:
        options["initializer"] = default_initializer()
    return options


def weight_arguments_config(layer, prefix):
    """The `<prefix>_*` weight arguments, serialised for `get_config`."""
    return {
        f"{prefix}_{kind}": module.serialize(getattr(layer, f"{prefix}_{kind}"))
        for kind, module in _WEIGHT_ARGUMENT_MODULES.items()
    }


def split_capsule_inputs(inputs):
    """`poses` or `[poses, activations]` (tensors or shapes) -> the pair."""
    if isinstance(inputs, (list, tuple)) and len(inputs) == 2 and not isinstance(
        inputs[0], (int, type(None))
    ):
        return inputs[0], inputs[1]
    return inputs, None


def check_matrix_inputs(layer_name, input_shape):
    """`[poses (batch, H, W, types, 16), activations (batch, H, W, types)]`."""
    if not (isinstance(input_shape, (list, tuple)) and len(input_shape) == 2
            and isinstance(input_shape[0], (list, tuple))):
        raise ValueError(
            f"{layer_name} expects [poses, activations]. Received: input_shape={input_shape}"
        )
    poses_shape, activations_shape = (tuple(s) for s in input_shape)
    if len(poses_shape) != 5 or poses_shape[-1] != POSE_SIZE:
        raise ValueError(
            f"{layer_name} expects poses of shape (batch, H, W, types, 16) "
            f"(4x4 pose matrices). Received: poses.shape={poses_shape}"
        )
    if activations_shape[1:] != poses_shape[1:-1]:
        raise ValueError(
            f"{layer_name} expects activations of shape {(None, *poses_shape[1:-1])}. "
            f"Received: activations.shape={activations_shape}"
        )
    return poses_shape, activations_shape


def check_kernel_fits(layer_name, grid_name, spatial, kernel_size, strides, padding):
    """The output grid of a windowed layer (`None` where `spatial` is);
    raises if the kernel does not fit the known sizes."""
    out = window_output_shape(spatial, kernel_size, strides, padding)
    if any(n is not None and n < 1 for n in out):
        raise ValueError(
            f"{layer_name}: `kernel_size={tuple(kernel_size)}` is larger than the "
            f"{grid_name} grid {tuple(spatial)} with padding='valid'."
        )
    return out


def check_grid(layer_name, spatial, kernel_size, strides, padding):
    """As `check_kernel_fits` for a capsule grid, whose sizes must be known."""
    if any(n is None for n in spatial):
        raise ValueError(
            f"{layer_name} needs a known grid size. Received: grid={tuple(spatial)}"
        )
    return check_kernel_fits(layer_name, "capsule", spatial, kernel_size, strides, padding)


def get_router(router, default, dtype):
    """A layer's `router=` argument as a `Router`, via `routing.get`.

    `None` -> `default(dtype=dtype)`, and a name -> that router, both in the
    layer's dtype policy `dtype`. A config dict loses any `build_config`
    (files saved before `serialize_router` dropped it carry one): the layer
    builds its router, for the votes shape it computes.
    """
    if router is None:
        return default(dtype=dtype)
    if isinstance(router, str):
        # Serialised: a router's auto-config (its get_config) keeps only
        # serialisable arguments.
        dtype = keras.dtype_policies.serialize(dtype)
        router = {"class_name": router, "config": {"dtype": dtype}}
    elif isinstance(router, dict):
        router = {k: v for k, v in router.items() if k != "build_config"}
    return routing.get(router)


def serialize_router(router):
    """A router's config without its `build_config`: the capsule layer that
    owns the router builds it, with the votes shape it computes."""
    config = routing.serialize(router)
    config.pop("build_config", None)
    return config


def build_router(router, votes_shape, activations_shape):
    """Builds `router` for votes of `votes_shape`; a router that is already
    built (shared with another layer, or deserialised) is checked instead,
    so that a size its weights do not fit fails here, at build time."""
    if router.built:
        router.check_inputs(votes_shape, activations_shape)
    else:
        router.build(votes_shape, activations_shape)


def call_router(layer, votes, activations, length_coded=False):
    """`layer.router(votes, activations)`, cast to the layer's compute dtype
    (the router may have its own policy; it routes in float32 under mixed
    precision either way).

    With `length_coded=True` (the vector-capsule layers), poses of a router
    whose poses have a fixed length (`Router.fixed_length_poses`) are
    rescaled to the length of their activations, the direction kept, so
    that a pose's length is its parent's activation for every router."""
    poses, activations = layer.router(votes, activations)
    if length_coded and layer.router.fixed_length_poses:
        poses = poses * (activations / safe_norm(poses))[..., None]
    return ops.cast(poses, layer.compute_dtype), ops.cast(activations, layer.compute_dtype)
