"""Dynamic routing by agreement (Sabour et al., 2017)."""

import keras
from keras import ops

from keras_capsules.ops import safe_norm, squash
from keras_capsules.routing import dynamic_backward
from keras_capsules.routing.base import Router
from keras_capsules.routing.parent_major import agreement, parent_major, swap_caps, weighted_sum
from keras_capsules.routing.registry import register
from keras_capsules.validation import one_of, positive_float, positive_int
from keras_capsules.xla_hint import XlaHinted, xla_compiles

AGREEMENTS = ("dot", "cosine", "euclidean")
BACKWARDS = ("manual", "autodiff")


@keras.saving.register_keras_serializable(package="keras_capsules")
@register("dynamic")
class DynamicRouting(XlaHinted, Router):
    """Dynamic routing by agreement.

    With votes `u[b, i, j, :]` of child `i` for parent `j`:

    ```
    b = zeros(batch, in_caps, out_caps)
    for r in range(iterations):
        c = softmax(b / temperature, axis=out_caps)
        s = sum_i c[:, i, j] * u[:, i, j, :]
        v = squash(s)
        if r < iterations - 1:
            b = b + step_size * agreement(u, v)
    poses = v; activations = safe_norm(v); coefficients = c
    ```

    `agreement` is `"dot"` (`sum_d u * v`, the paper), `"cosine"`
    (`dot / (safe_norm(u) * safe_norm(v))`) or `"euclidean"`
    (`-sum_d (u - v)^2`). With `stop_gradient=True` the iterations before
    the last one see `stop_gradient(u)` (the naturomics variant: a cheaper
    backward pass); the default `False` matches the official code, which
    differentiates through every iteration.

    Input `activations` are accepted (checked against the votes) and
    ignored: dynamic routing weighs children by the length of their votes
    only. The router has no weights, so one instance may route votes of
    any size (several capsule layers may share it).

    Args:
        iterations: number of routing iterations, `>= 1`.
        temperature: divides the logits before the softmax, `> 0`.
        agreement: `"dot"`, `"cosine"` or `"euclidean"`.
        step_size: multiplies each logit update, `> 0`.
        stop_gradient: stop gradients through the votes in every iteration
            but the last.
        backward: `"manual"` (default) differentiates the routing with a
            backward pass written by hand
            (`keras_capsules.routing.dynamic_backward`): it keeps only the
            votes and `(batch, out_caps, in_caps)`-sized tensors per
            iteration and writes the votes' gradient as one batched
            matmul. `"autodiff"` lets the backend differentiate the loop.
            Both give the same gradients (to float32 rounding); the time
            and memory of each are measured in `docs/performance.md`. A
            speed option: not saved in the config.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        votes: `u`, `(batch, in_caps, out_caps, dim)`.
        activations: optional `(batch, in_caps)`, checked and ignored.
        return_coefficients: also return `c`.

    Returns:
        `(poses, activations)`: `v` `(batch, out_caps, dim)` and its
        lengths `(batch, out_caps)`; then `c` `(batch, in_caps, out_caps)`
        with `return_coefficients=True`.

    Example:

    >>> router = keras_capsules.routing.DynamicRouting(iterations=3)
    >>> votes = keras.random.normal((2, 32, 10, 16))
    >>> poses, lengths, c = router(votes, return_coefficients=True)
    >>> tuple(poses.shape), tuple(lengths.shape), tuple(c.shape)
    ((2, 10, 16), (2, 10), (2, 32, 10))
    >>> float(ops.convert_to_numpy(ops.sum(c, axis=-1)).round(3).min())  # softmax over parents
    1.0

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (Procedure 1).
    """

    def __init__(
        self,
        iterations=3,
        temperature=1.0,
        agreement="dot",
        step_size=1.0,
        stop_gradient=False,
        backward="manual",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.iterations = positive_int(iterations, "iterations")
        self.temperature = positive_float(temperature, "temperature")
        self.agreement = one_of(agreement, AGREEMENTS, "agreement")
        self.step_size = positive_float(step_size, "step_size")
        self.stop_gradient = bool(stop_gradient)
        self.backward = one_of(backward, BACKWARDS, "backward")

    def route(self, votes, activations):
        del activations  # Dynamic routing does not use child activations.
        out_caps = votes.shape[2]
        u = parent_major(votes)
        # A softmax over one parent is 1 whatever the logits: one pass.
        iterations = 1 if out_caps == 1 else self.iterations
        if self.backward == "manual":
            v, coefficients = dynamic_backward.dynamic_routing(
                u,
                iterations,
                self.temperature,
                self.agreement,
                self.step_size,
                self.stop_gradient,
                fused=xla_compiles(self.xla),
            )
            return v, safe_norm(v), swap_caps(coefficients)
        # Every iteration but the last only feeds the logits.
        early = ops.stop_gradient(u) if self.stop_gradient else u
        early_norm = safe_norm(early) if self.agreement == "cosine" else None
        logits = coefficients = None
        for r in range(iterations):
            last = r == iterations - 1
            uu = u if last else early
            if logits is None:
                # softmax(0) is uniform: skip the softmax and one einsum.
                s = ops.sum(uu, axis=2) / out_caps
            else:
                coefficients = ops.softmax(logits / self.temperature, axis=1)
                s = weighted_sum(coefficients, uu)
            v = squash(s)
            if not last:
                update = self._agreement(uu, v, early_norm) * self.step_size
                logits = update if logits is None else logits + update
        if coefficients is None:
            coefficients = ops.full_like(votes[..., 0], 1.0 / out_caps)
        else:
            coefficients = swap_caps(coefficients)
        return v, safe_norm(v), coefficients

    def _agreement(self, u, v, u_norm):
        """`(batch, out, in)` agreement of parent-major votes `u` with `v`."""
        if self.agreement == "euclidean":
            return -ops.sum(ops.square(u - v[:, :, None]), axis=-1)
        dot = agreement(u, v)
        if self.agreement == "cosine":
            return dot / (u_norm * safe_norm(v)[:, :, None])
        return dot

    def get_config(self):
        config = super().get_config()
        config.update(
            iterations=self.iterations,
            temperature=self.temperature,
            agreement=self.agreement,
            step_size=self.step_size,
            stop_gradient=self.stop_gradient,
        )
        return config
