"""Input specs of built layers whose children are `(batch, in_caps, ...)`
poses, with or without activations `(batch, in_caps)`: `Capsule` and
`HeinsenCapsule`."""

from keras_capsules.validation import built_input_spec


def children_spec(poses_shape, activations_shape, share_weights):
    """The input spec of a layer built for child poses `(batch, in_caps,
    ...)` (and activations `(batch, in_caps)`, or `None`): their ranks, the
    poses' sizes after `in_caps`, and `in_caps` unless `share_weights`
    (then any number of children is accepted). Keras's `__call__` then
    refuses other sizes before any computation, naming the layer, the axis,
    the size expected and the shape received."""
    poses_shape = tuple(poses_shape)
    # From in_caps (axis 1), or from the axis after it, to the last; counted
    # from the end, as Keras's messages then name them.
    first = 2 if share_weights else 1
    spec = built_input_spec(poses_shape, tuple(range(first - len(poses_shape), 0)))
    if activations_shape is None:
        return spec
    return [spec, built_input_spec(activations_shape, () if share_weights else (-1,))]
