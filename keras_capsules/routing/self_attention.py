"""Self-attention routing of Efficient-CapsNet (Mazzia et al., 2021)."""

import keras
from keras import ops

from keras_capsules.ops import efficient_squash, safe_norm
from keras_capsules.routing import self_attention_backward
from keras_capsules.routing.base import Router
from keras_capsules.routing.custom_backward import runs_manual_backward
from keras_capsules.routing.parent_major import agreement, parent_major, swap_caps, weighted_sum
from keras_capsules.routing.registry import register
from keras_capsules.validation import one_of, positive_float
from keras_capsules.xla_hint import XlaHinted, xla_compiles

BACKWARDS = ("manual", "autodiff")


@keras.saving.register_keras_serializable(package="keras_capsules")
@register("self_attention")
class SelfAttentionRouting(XlaHinted, Router):
    """Non-iterative self-attention routing.

    With votes `u[b, i, j, :]` (`dim` = pose size):

    ```
    consensus[b, j] = sum_i u[b, i, j]
    A[b, i, j] = u[b, i, j] . consensus[b, j] / sqrt(dim)
    C = softmax(A / temperature, axis=out_caps) + B     # B: (in_caps, out_caps)
    s[b, j] = sum_i C[b, i, j] * u[b, i, j]
    poses = efficient_squash(s); activations = safe_norm(poses)
    ```

    `A` equals the paper's `sum_k (U U^T)_{ik} / sqrt(dim)` computed with
    one einsum, never materialising the `(in_caps x in_caps)` matrix. The
    trainable priors `B` start at zero and are added after the softmax, as
    in the official code. Input `activations` are accepted and ignored.

    Args:
        temperature: divides the logits before the softmax, `> 0`.
        use_priors: learn the priors `B`; needs a known `in_caps`.
        backward: `"manual"` (default) differentiates the routing with a
            backward pass written by hand
            (`keras_capsules.routing.self_attention_backward`) that writes
            the votes' gradient once; `"autodiff"` lets the backend
            differentiate it. Both give the same gradients (to float32
            rounding). A speed option: not saved in the config.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    `B` is the router's own weight (zeros, no regularizer or constraint
    arguments: it is not a kernel).

    Call arguments:
        votes: `u`, `(batch, in_caps, out_caps, dim)`.
        activations: optional `(batch, in_caps)`, checked and ignored.
        return_coefficients: also return `C`.

    Returns:
        poses `(batch, out_caps, dim)` and their lengths `(batch,
        out_caps)` (and `C`, `(batch, in_caps, out_caps)`, when asked).

    Example:

    >>> router = keras_capsules.routing.SelfAttentionRouting()
    >>> poses, lengths = router(keras.random.normal((2, 16, 10, 8)))
    >>> tuple(poses.shape), tuple(lengths.shape), tuple(router.priors.shape)
    ((2, 10, 8), (2, 10), (16, 10))

    Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 11, 2021.
    """

    def __init__(self, temperature=1.0, use_priors=True, backward="manual", **kwargs):
        super().__init__(**kwargs)
        self.temperature = positive_float(temperature, "temperature")
        self.use_priors = bool(use_priors)
        self.backward = one_of(backward, BACKWARDS, "backward")

    @property
    def weight_axes(self):
        return (1, 2) if self.use_priors else ()  # priors: (in_caps, out_caps)

    def build(self, votes_shape, activations_shape=None):
        super().build(votes_shape, activations_shape)
        if self.use_priors:
            in_caps, out_caps = votes_shape[1], votes_shape[2]
            if in_caps is None or out_caps is None:
                raise ValueError(
                    "SelfAttentionRouting(use_priors=True) has a prior per child and "
                    "parent, so it needs known in_caps and out_caps. For sets or "
                    "sequences of any size (in_caps=None), use "
                    "SelfAttentionRouting(use_priors=False), or give the input a fixed "
                    f"size. Received: votes.shape={tuple(votes_shape)}"
                )
            self.priors = self.add_weight(
                name="priors", shape=(in_caps, out_caps), initializer="zeros"
            )

    def route(self, votes, activations):
        del activations  # Self-attention routing does not use them.
        dim = votes.shape[-1]
        u = parent_major(votes)
        if runs_manual_backward(self.backward):
            priors = None
            if self.use_priors:
                priors = ops.transpose(ops.cast(self.priors, u.dtype), (1, 0))
            poses, coefficients = self_attention_backward.self_attention_routing(
                u, priors, self.temperature, fused=xla_compiles(self.xla)
            )
            return poses, safe_norm(poses), swap_caps(coefficients)
        consensus = ops.sum(u, axis=2)
        logits = agreement(u, consensus) / (dim**0.5 * self.temperature)
        coefficients = ops.softmax(logits, axis=1)
        if self.use_priors:
            coefficients = coefficients + ops.transpose(ops.cast(self.priors, u.dtype), (1, 0))
        poses = efficient_squash(weighted_sum(coefficients, u))
        return poses, safe_norm(poses), swap_caps(coefficients)

    def get_config(self):
        config = super().get_config()
        config.update(temperature=self.temperature, use_priors=self.use_priors)
        return config
