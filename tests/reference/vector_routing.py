"""Reference vector routing (Heinsen, 2022, arXiv:2211.11754) in float64,
written from the paper's algorithm with the votes materialised, one
sequence at a time (each with its own length)."""

import numpy as np

from tests.reference.ops import softmax


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _norm(x, epsilon=1e-5):
    if x.shape[-1] == 1:
        return x
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + epsilon)


def route_one(x, w, iterations=2, normalize=True):
    """x (n, d); w: {name: array} of `VectorRouting`'s weights. Returns
    (outputs (j, h), phi (n, j))."""
    n = x.shape[0]
    rows = slice(None) if w["activation_kernel"].shape[0] == n else slice(0, 1)
    scaled = x / np.sqrt(n)
    a = (scaled * w["activation_kernel"][rows]).sum(-1) + w["activation_bias"][rows]
    present = _sigmoid(a)[:, None]
    if "beta_use" in w:
        beta_use, beta_ign = w["beta_use"], w["beta_ign"]
    else:
        beta_use = x @ w["beta_use_kernel"] + w["beta_use_bias"]
        beta_ign = x @ w["beta_ign_kernel"] + w["beta_ign_bias"]
    votes = np.einsum("nd,jd,dh->njh", scaled, w["vote_scale"], w["vote_kernel"]) + w["vote_bias"]
    n_out = votes.shape[1]
    outputs = None
    for iteration in range(iterations):
        if iteration == 0:
            shares = np.full((n, n_out), 1.0 / n_out)
        else:
            predicted = (_norm(outputs) @ w["prediction_kernel"]) * w["prediction_scale"]
            predicted = predicted + w["prediction_bias"]
            agreement = (x @ predicted.T) * w["agreement_scale"][rows] + w["agreement_bias"][rows]
            shares = softmax(_log_sigmoid(agreement), axis=-1)
        use = present * shares
        phi = beta_use * use - beta_ign * (present - use)
        outputs = np.einsum("nj,njh->jh", phi, votes)
    if normalize:
        outputs = _norm(outputs)
    return outputs, phi


def vector_routing(x, weights, lengths=None, iterations=2, normalize=True):
    """Batched: x (b, n, d), each sequence routed over its first `lengths[b]`
    inputs (all by default). Returns (outputs (b, j, h), phi (b, n, j), 0
    past each length)."""
    lengths = [x.shape[1]] * x.shape[0] if lengths is None else lengths
    outputs, phis = [], []
    for sequence, length in zip(x, lengths):
        out, phi = route_one(sequence[:length], weights, iterations, normalize)
        outputs.append(out)
        phis.append(np.pad(phi, ((0, x.shape[1] - length), (0, 0))))
    return np.stack(outputs), np.stack(phis)
