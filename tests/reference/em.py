"""Reference EM routing (Hinton, Sabour & Frosst, 2018) in float64."""

import numpy as np

from tests.reference.ops import softmax


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def inverse_temperatures(iterations, final_lambda=1.0, inverse_temperature=None):
    if inverse_temperature is None:
        return [final_lambda * (1 - 0.95 ** (t + 1)) for t in range(iterations)]
    if np.isscalar(inverse_temperature):
        return [float(inverse_temperature)] * iterations
    return list(inverse_temperature)


def em_routing(
    votes,
    activations=None,
    beta_u=None,
    beta_a=None,
    iterations=3,
    final_lambda=1.0,
    inverse_temperature=None,
    epsilon=1e-4,
):
    """Returns (poses, activations, coefficients), as in issue 3's pseudo-code."""
    batch, n_in, n_out, _ = votes.shape
    a_in = np.ones((batch, n_in)) if activations is None else activations
    beta_u = np.zeros(n_out) if beta_u is None else beta_u
    beta_a = np.zeros(n_out) if beta_a is None else beta_a
    lambdas = inverse_temperatures(iterations, final_lambda, inverse_temperature)
    r = np.full((batch, n_in, n_out), 1.0 / n_out)
    for t in range(iterations):
        ra = r * a_in[:, :, None]
        rsum = ra.sum(axis=1) + 1e-7
        mu = np.einsum("bij,bijp->bjp", ra, votes) / rsum[..., None]
        var = np.einsum("bij,bijp->bjp", ra, (votes - mu[:, None]) ** 2) / rsum[..., None]
        var = var + epsilon
        cost = (beta_u[None, :, None] + 0.5 * np.log(var)) * (rsum * n_out / n_in)[..., None]
        a_out = sigmoid(lambdas[t] * (beta_a - cost.sum(axis=-1)))
        coefficients = r
        if t < iterations - 1:
            log_p = (
                -np.sum((votes - mu[:, None]) ** 2 / (2 * var[:, None]), axis=-1)
                - 0.5 * np.sum(np.log(2 * np.pi * var), axis=-1)[:, None]
            )
            r = softmax(np.log(a_out)[:, None] + log_p, axis=2)
    return mu, a_out, coefficients
