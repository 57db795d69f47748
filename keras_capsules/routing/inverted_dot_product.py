"""Inverted dot-product attention routing (Tsai et al., 2020)."""

import keras
from keras import ops

from keras_capsules.ops import layer_norm, squash_length
from keras_capsules.routing import inverted_dot_product_backward
from keras_capsules.routing.base import Router
from keras_capsules.routing.custom_backward import runs_manual_backward
from keras_capsules.routing.parent_major import agreement, parent_major, swap_caps, weighted_sum
from keras_capsules.routing.registry import register
from keras_capsules.validation import one_of, positive_float, positive_int
from keras_capsules.xla_hint import XlaHinted, xla_compiles

LAYER_NORM_EPSILON = 1e-5
BACKWARDS = ("manual", "autodiff")


@keras.saving.register_keras_serializable(package="keras_capsules")
@register("inverted_dot_product")
class InvertedDotProductRouting(XlaHinted, Router):
    """Inverted dot-product attention routing.

    Parents compete for children (softmax over parents), agreement is a
    scaled dot product, and parent poses are layer-normalised:

    ```
    r = 1 / out_caps
    s = sum_i r[b, i, j] * u[b, i, j];  v = LayerNorm(s)
    repeat iterations - 1 times:
        r = softmax(u[b, i, j] . v[b, j] / (sqrt(dim) * temperature), axis=out_caps)
        s = sum_i r[b, i, j] * u[b, i, j];  v = LayerNorm(s)
    poses = v; activations = |s|^2 / (1 + |s|^2); coefficients = r
    ```

    `LayerNorm` normalises over `dim` (epsilon 1e-5) with a learnable scale
    (ones at init) and offset (zeros) shared by all parents; the router owns
    them, so it needs a known `dim`. Input `activations` are accepted and
    ignored.

    Activations: the layer-normalised poses all have about the same length
    (that of the scale), so their length says nothing of a parent. Tsai et
    al. read the class capsules with a linear classifier; here a parent's
    activation is the length of the squashed sum `s` of its last update
    (`keras_capsules.ops.squash_length`), which grows with the votes'
    agreement, as in dynamic routing. The vector-capsule layers (`Capsule`,
    `ConvCapsule1D/2D`) return the poses rescaled to that length
    (`fixed_length_poses = True`), so `Length` reads the activations.

    Args:
        iterations: number of pose updates, `>= 1` (the first one uses
            uniform coefficients).
        temperature: divides the agreement logits, `> 0`.
        backward: `"manual"` (default) differentiates the routing with a
            backward pass written by hand
            (`keras_capsules.routing.inverted_dot_product_backward`) that
            keeps only `(batch, out_caps, in_caps)`- and `(batch, out_caps,
            dim)`-sized tensors per iteration and writes the votes'
            gradient once; `"autodiff"` lets the backend differentiate the
            loop. Both give the same gradients (to float32 rounding). A
            speed option: not saved in the config.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    The scale and offset are the router's own LayerNorm weights (no
    initializer, regularizer or constraint arguments: they are not
    kernels).

    Call arguments:
        votes: `u`, `(batch, in_caps, out_caps, dim)`.
        activations: optional `(batch, in_caps)`, checked and ignored.
        return_coefficients: also return `r`.

    Returns:
        `(poses (batch, out_caps, dim), activations (batch, out_caps))`, the
        activations in [0, 1); then `r` `(batch, in_caps, out_caps)` with
        `return_coefficients=True`.

    Example:

    >>> router = keras_capsules.routing.InvertedDotProductRouting(iterations=3)
    >>> poses, lengths = router(keras.random.normal((2, 16, 10, 8)))
    >>> tuple(poses.shape), tuple(lengths.shape)
    ((2, 10, 8), (2, 10))
    >>> bool(np.abs(ops.convert_to_numpy(ops.mean(poses, axis=-1))).max() < 1e-5)  # LayerNorm
    True

    Reference: Tsai, Srivastava, Goh & Salakhutdinov, "Capsules with Inverted
    Dot-Product Attention Routing", ICLR 2020.
    """

    def __init__(self, iterations=2, temperature=1.0, backward="manual", **kwargs):
        super().__init__(**kwargs)
        self.iterations = positive_int(iterations, "iterations")
        self.temperature = positive_float(temperature, "temperature")
        self.backward = one_of(backward, BACKWARDS, "backward")

    weight_axes = (3,)  # the LayerNorm scale and offset: (dim,)
    fixed_length_poses = True
    pose_length = "rescaled"

    def build(self, votes_shape, activations_shape=None):
        super().build(votes_shape, activations_shape)
        dim = votes_shape[-1]
        if dim is None:
            raise ValueError(
                "InvertedDotProductRouting needs a known dim. "
                f"Received: votes.shape={tuple(votes_shape)}"
            )
        self.scale = self.add_weight(name="scale", shape=(dim,), initializer="ones")
        self.offset = self.add_weight(name="offset", shape=(dim,), initializer="zeros")

    def route(self, votes, activations):
        del activations  # Inverted dot-product routing does not use them.
        out_caps, dim = votes.shape[2], votes.shape[3]
        u = parent_major(votes)
        if runs_manual_backward(self.backward):
            v, s, coefficients = inverted_dot_product_backward.inverted_dot_product_routing(
                u,
                ops.cast(self.scale, u.dtype),
                ops.cast(self.offset, u.dtype),
                self.iterations,
                self.temperature,
                LAYER_NORM_EPSILON,
                fused=xla_compiles(self.xla),
            )
            return v, squash_length(s), swap_caps(coefficients)
        # The first update has uniform coefficients: no softmax, no einsum.
        coefficients = None
        s = ops.sum(u, axis=2) / out_caps
        v = self._layer_norm(s)
        for _ in range(self.iterations - 1):
            logits = agreement(u, v) / (dim**0.5 * self.temperature)
            coefficients = ops.softmax(logits, axis=1)
            s = weighted_sum(coefficients, u)
            v = self._layer_norm(s)
        if coefficients is None:
            coefficients = ops.full_like(votes[..., 0], 1.0 / out_caps)
        else:
            coefficients = swap_caps(coefficients)
        return v, squash_length(s), coefficients

    def _layer_norm(self, x):
        normed = layer_norm(x, LAYER_NORM_EPSILON)
        return normed * ops.cast(self.scale, x.dtype) + ops.cast(self.offset, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(iterations=self.iterations, temperature=self.temperature)
        return config
