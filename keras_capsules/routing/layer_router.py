"""The router a capsule layer owns: resolved from its `router=` argument
(`get_router`), stored in its config (`serialize_router`), built for the
votes it computes (`build_router`) and called (`call_router`).

The layers of `keras_capsules.layers` and the ready models use these; a
capsule layer of your own that takes `router=` can too.
"""

import keras
from keras import ops

from keras_capsules import routing
from keras_capsules.ops import safe_norm


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
    that a pose's length is its parent's activation for every router.
    Activations that are logits (`Router.logit_activations`: Heinsen
    routing's scores) become `sigmoid(activations)` there first, so the
    poses have lengths in (0, 1).

    The router's `call` runs directly, not through `Layer.__call__`: on
    torch, Keras's `__call__` flattens its arguments with a recursive
    closure that keeps them in a reference cycle until Python's garbage
    collector runs, so the votes (often the largest tensor of the step, not
    needed once the router has copied them into its own layout) would stay
    alive through the backward pass and the optimizer's update: 1-2
    vote-sized buffers more in a torch training step
    (`benchmarks/memory.py`). The router needs nothing `__call__` adds: the
    layer built it, it reads its variables without autocasting and casts
    the votes itself."""
    poses, activations = layer.router.call(votes, activations)
    router = layer.router
    if length_coded and router.logit_activations:
        activations = ops.sigmoid(activations)
    if length_coded and (router.fixed_length_poses or router.logit_activations):
        poses = poses * (activations / safe_norm(poses))[..., None]
    return ops.cast(poses, layer.compute_dtype), ops.cast(activations, layer.compute_dtype)
