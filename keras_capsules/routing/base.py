"""The contract every router follows."""

import keras
from keras import ops

from keras_capsules.ops import compute_dtype_for


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
    in `build(votes_shape, activations_shape=None)`.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Votes reach `call` in their own dtype (not cast down to a half
        # compute dtype first) and router weights are read in float32.
        self.autocast = False

    def build(self, votes_shape, activations_shape=None):
        check_votes_shape(votes_shape, self.__class__.__name__)
        self.built = True

    def call(self, votes, activations=None, return_coefficients=False):
        dtype = compute_dtype_for(self.compute_dtype)
        votes = ops.cast(votes, dtype)
        if activations is not None:
            activations = ops.cast(activations, dtype)
        outputs = self.route(votes, activations)
        outputs = tuple(ops.cast(t, self.compute_dtype) for t in outputs)
        return outputs if return_coefficients else outputs[:2]

    def route(self, votes, activations):
        raise NotImplementedError(
            f"{self.__class__.__name__} must implement `route(votes, activations)`."
        )

    def compute_output_shape(
        self, votes_shape, activations_shape=None, return_coefficients=False
    ):
        check_votes_shape(votes_shape, self.__class__.__name__)
        batch, in_caps, out_caps, dim = votes_shape
        shapes = ((batch, out_caps, dim), (batch, out_caps))
        if return_coefficients:
            shapes += ((batch, in_caps, out_caps),)
        return shapes

    def compute_output_spec(
        self, votes, activations=None, return_coefficients=False
    ):
        shapes = self.compute_output_shape(
            votes.shape,
            None if activations is None else activations.shape,
            return_coefficients,
        )
        return tuple(keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes)


def check_votes_shape(votes_shape, name):
    """Raises a clear error unless `votes_shape` is `(batch, in, out, dim)`."""
    if len(votes_shape) != 4:
        raise ValueError(
            f"{name} expects votes of shape (batch, in_caps, out_caps, dim). "
            f"Received: votes.shape={tuple(votes_shape)}"
        )
