"""Reference capsule ops in float64."""

import numpy as np


def safe_norm(x, axis=-1, keepdims=False, epsilon=1e-7):
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims) + epsilon)


def squash(x, axis=-1, epsilon=1e-7):
    n2 = np.sum(x * x, axis=axis, keepdims=True)
    return n2 / (1.0 + n2) * x / np.sqrt(n2 + epsilon)


def efficient_squash(x, axis=-1, epsilon=1e-7):
    n = safe_norm(x, axis=axis, keepdims=True, epsilon=epsilon)
    return (1.0 - 1.0 / np.exp(n)) * x / n


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)
