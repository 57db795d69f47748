"""Central finite differences of a scalar function of reference outputs."""

import numpy as np


def fd_gradients(case, arrays):
    """Gradient of `sum_k sum(outputs[k] * cotangents[k])` w.r.t. `case.diff`."""
    base = {k: np.array(v) for k, v in arrays.items()}

    def outputs(perturbed):
        if case.grad_reference is not None:
            return case.grad_reference(perturbed, base)
        return case.reference(perturbed)

    cotangents = case.cotangents([np.shape(o) for o in case.reference(base)])

    def loss(perturbed):
        return sum(np.sum(o * c) for o, c in zip(outputs(perturbed), cotangents))

    grads = {}
    h = case.fd_step
    for name in case.diff:
        x = base[name]
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus, minus = dict(base), dict(base)
            plus[name] = x.copy()
            plus[name][idx] += h
            minus[name] = x.copy()
            minus[name][idx] -= h
            g[idx] = (loss(plus) - loss(minus)) / (2 * h)
        grads[name] = g
    return grads
