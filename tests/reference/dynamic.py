"""Reference dynamic routing (Sabour et al., 2017) and capsule votes."""

import numpy as np

from tests.reference.ops import safe_norm, softmax, squash


def dynamic_routing(
    votes, iterations=3, temperature=1.0, agreement="dot", step_size=1.0, early_votes=None
):
    """Returns (poses, activations, coefficients).

    `early_votes`, if given, replaces `votes` in every iteration but the
    last: differentiating with it held fixed gives the gradient of the
    `stop_gradient=True` variant (its values are the same).
    """
    batch, in_caps, out_caps, _ = votes.shape
    early_votes = votes if early_votes is None else early_votes
    b = np.zeros((batch, in_caps, out_caps))
    for r in range(iterations):
        u = votes if r == iterations - 1 else early_votes
        c = softmax(b / temperature, axis=2)
        s = np.einsum("bij,bijd->bjd", c, u)
        v = squash(s)
        if r < iterations - 1:
            b = b + step_size * _agreement(u, v, agreement)
    return v, safe_norm(v), c


def _agreement(votes, v, kind):
    if kind == "euclidean":
        return -np.sum((votes - v[:, None]) ** 2, axis=-1)
    dot = np.einsum("bijd,bjd->bij", votes, v)
    if kind == "cosine":
        return dot / (safe_norm(votes) * safe_norm(v)[:, None, :])
    return dot


def capsule_votes(poses, kernel):
    """`u_hat[b,i,j,:] = u[b,i,:] @ W[i,j]`; a 3-D kernel is shared over i."""
    if kernel.ndim == 3:
        return np.einsum("bid,jde->bije", poses, kernel)
    return np.einsum("bid,ijde->bije", poses, kernel)
