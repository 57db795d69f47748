"""Measures of one routed layer's activations and routing, on NumPy arrays
(computed in float64): how many parents starve, how spread or tree-like
the routing is, whether a child keeps its parent across inputs of a class,
how long the poses are. `keras_capsules.diagnostics.capsule_statistics`
takes them for every routed layer of a model in one forward pass.

Shapes: coefficients `(batch, children, parents)` (for windowed layers the
windows' children in one axis, the parents being the capsule types);
activations `(batch, parents)`. Coefficients are read per child over its
parents (`c[b, i, :] / sum_j c[b, i, j]`), whichever axis the router
normalises (quaternion routing normalises over the children).

The questions are those of two critiques of deep capsule networks:
Mitterreiter, Koch, Giesen & Laue, "Why Capsule Neural Networks Do Not
Scale: Challenging the Dynamic Parse-Tree Assumption", AAAI 2023 (capsules
that starve, routing that does not form an input-specific parse tree), and
Everett, Zhong & Leontidis, "Vanishing Activations: A Symptom of Deep
Capsule Networks", 2023 (activations that shrink with depth). The measures
here are this library's definitions, stated in each function; their
thresholds are arguments.
"""

import numpy as np


def per_child(coefficients):
    """Coefficients `(batch, children, parents)` as each child's
    distribution over its parents (rows summing to 1; a child with all-zero
    coefficients spreads evenly)."""
    c = np.asarray(coefficients, dtype="float64")
    if c.ndim != 3:
        raise ValueError(
            f"`coefficients` must be (batch, children, parents). Received: shape={c.shape}"
        )
    total = c.sum(axis=-1, keepdims=True)
    even = np.full_like(c, 1.0 / c.shape[-1])
    return np.where(total > 0, c / np.where(total > 0, total, 1.0), even)


def starved_fraction(activations, threshold=0.01):
    """The fraction of parents whose activation stays below `threshold` for
    every input of the batch: capsules that never take part (starved).

    Example:

    >>> a = np.array([[0.9, 0.001, 0.5], [0.8, 0.002, 0.005]])
    >>> float(keras_capsules.capsule_measures.starved_fraction(a))  # the middle one
    0.3333333333333333
    """
    a = _activations(activations)
    return float(np.mean(np.all(a < threshold, axis=0)))


def normalized_entropy(coefficients):
    """The entropy of each child's coefficients over its parents, over its
    largest (`log parents`), averaged: 1 for a child that splits its vote
    evenly, 0 for one that sends it all to one parent.

    Example:

    >>> even = np.full((1, 2, 4), 0.25)
    >>> float(keras_capsules.capsule_measures.normalized_entropy(even))
    1.0
    """
    p = per_child(coefficients)
    if p.shape[-1] < 2:
        return 0.0
    entropy = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    return float(np.mean(entropy / np.log(p.shape[-1])))


def tree_fraction(coefficients, share=0.5):
    """The fraction of children that send more than `share` of their vote to
    one parent: how tree-like the routing is (1: every child has one parent).

    Example:

    >>> c = np.array([[[0.9, 0.1], [0.5, 0.5]]])
    >>> float(keras_capsules.capsule_measures.tree_fraction(c))
    0.5
    """
    return float(np.mean(per_child(coefficients).max(axis=-1) > share))


def coefficient_spread(coefficients):
    """How much the routing depends on the input: the standard deviation
    over the batch of each coefficient (child, parent), averaged. 0 when
    every input is routed alike (static routing).

    Example:

    >>> same = np.tile([[[0.7, 0.3]]], (5, 1, 1))
    >>> float(keras_capsules.capsule_measures.coefficient_spread(same))
    0.0
    """
    return float(np.mean(per_child(coefficients).std(axis=0)))


def iteration_change(coefficients, previous):
    """How much routing's last iteration moved the coefficients: each
    child's total-variation distance between its distributions over the
    parents after the last iteration and after the one before,
    `0.5 * sum_j |p[b, i, j] - q[b, i, j]|`, averaged over inputs and
    children. 0: routing had converged (or its last iteration changes
    nothing); 1: every child moved all of its vote to other parents.
    Both arrays `(batch, children, parents)`."""
    p, q = per_child(coefficients), per_child(previous)
    if p.shape != q.shape:
        raise ValueError(
            "`coefficients` and `previous` must have the same shape. "
            f"Received: {p.shape} and {q.shape}"
        )
    return float(np.mean(0.5 * np.abs(p - q).sum(axis=-1)))


def children_per_active_parent(coefficients, activations, threshold=0.01):
    """How many children choose each active parent (activation `>=
    threshold`) as their strongest, averaged over the active parents of
    every input; NaN when no parent is active. In a parse tree an active
    parent collects its parts, and no child is shared.

    Example:

    >>> c = np.array([[[0.9, 0.1], [0.8, 0.2], [0.3, 0.7]]])
    >>> a = np.array([[0.9, 0.001]])  # the second parent is inactive
    >>> float(keras_capsules.capsule_measures.children_per_active_parent(c, a))
    2.0
    """
    p = per_child(coefficients)
    a = _activations(activations)
    if a.shape != (p.shape[0], p.shape[-1]):
        raise ValueError(
            f"`activations` must be (batch, parents) = {(p.shape[0], p.shape[-1])}. "
            f"Received: shape={a.shape}"
        )
    counts = np.stack([np.sum(p.argmax(-1) == j, axis=-1) for j in range(p.shape[-1])], -1)
    active = a >= threshold
    return float(counts[active].mean()) if active.any() else float("nan")


def parent_consistency(coefficients, labels):
    """How consistently a child chooses its strongest parent across the
    inputs of one class: for each class (with two inputs or more) and each
    child, the share of the class's inputs whose strongest parent is the
    child's most frequent one, averaged over children, then classes. 1: the
    same parse for every input of a class; `1 / parents` or so: no
    structure.

    Example:

    >>> c = np.array([[[0.9, 0.1]], [[0.8, 0.2]], [[0.1, 0.9]], [[0.2, 0.8]]])
    >>> float(keras_capsules.capsule_measures.parent_consistency(c, [0, 0, 1, 1]))
    1.0
    """
    p = per_child(coefficients)
    labels = np.asarray(labels).reshape(-1)
    if len(labels) != len(p):
        raise ValueError(
            f"`labels` must give one class per input ({len(p)}). Received: {len(labels)} labels"
        )
    winners = p.argmax(axis=-1)  # (batch, children)
    shares = []
    for k in np.unique(labels):
        chosen = winners[labels == k]
        if len(chosen) < 2:
            continue
        counts = np.stack([np.sum(chosen == j, axis=0) for j in range(p.shape[-1])])
        shares.append(np.mean(counts.max(axis=0) / len(chosen)))
    return float(np.mean(shares)) if shares else float("nan")


def _activations(activations):
    a = np.asarray(activations, dtype="float64")
    return a.reshape(len(a), -1)
