"""Reference Heinsen routing (Heinsen, 2019, arXiv:1911.00792) in float64,
written from the paper's algorithm (its Figure 1) and issue 23."""

import numpy as np

from tests.reference.ops import softmax


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def heinsen_routing(votes, activations, beta_use, beta_ign, iterations=3, epsilon=1e-5):
    """Returns (mu, a_out, R, sig2). votes (b, i, j, p); activations: logits
    (b, i) or None (all present); beta_use, beta_ign: (i or 1, j)."""
    batch, n_in, n_out, _ = votes.shape
    present = np.ones((batch, n_in, 1)) if activations is None else sigmoid(activations)[..., None]

    def d_and_m_steps(r):
        d_use = present * r
        d_ign = present - d_use
        a_out = np.sum(beta_use * d_use, axis=1) - np.sum(beta_ign * d_ign, axis=1)
        total = d_use.sum(axis=1) + epsilon  # (b, j)
        mu = np.einsum("bij,bijp->bjp", d_use, votes) / total[..., None]
        sig2 = np.einsum("bij,bijp->bjp", d_use, (votes - mu[:, None]) ** 2) / total[..., None]
        return a_out, mu, sig2 + epsilon

    r = np.full((batch, n_in, n_out), 1.0 / n_out)
    a_out, mu, sig2 = d_and_m_steps(r)
    for _ in range(1, iterations):
        log_p = -np.sum((votes - mu[:, None]) ** 2 / (2 * sig2[:, None]), axis=-1)
        log_p = log_p - np.sum(np.log(np.sqrt(sig2)), axis=-1)[:, None]
        r = softmax(np.log(sigmoid(a_out))[:, None] + log_p, axis=2)
        a_out, mu, sig2 = d_and_m_steps(r)
    return mu, a_out, r, sig2


def heinsen_votes(poses, kernel, bias):
    """`V[b, i, j] = poses[b, i] @ kernel[i, j] + bias[i, j]`, flattened to
    (b, i, j, d_cov * d_out); kernel (i or 1, j, d_inp, d_out), bias
    (i or 1, j, d_cov, d_out), poses (b, i, d_cov, d_inp)."""
    votes = (
        np.einsum(
            "bicd,ijde->bijce", poses, np.broadcast_to(kernel, (poses.shape[1],) + kernel.shape[1:])
        )
        + bias
    )
    return votes.reshape(*votes.shape[:3], -1)
