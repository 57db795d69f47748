"""The top eigenpair of symmetric positive semi-definite 3x3 and 4x4
matrices, in closed form, written with `keras.ops` only.

`keras.ops.eigh` solves each of many small problems on its own (LAPACK on
CPU): for the tens of thousands of 4x4 scatter matrices that quaternion
routing averages per iteration it took 30-60 ms, most of the routing's
time, and 20-40 ms for the 3x3 covariances of the local reference frames.
Here every step is elementwise over the matrices' entries, held as
separate tensors, so that XLA fuses the whole computation and TensorFlow
runs a few hundred element-wise kernels:

1. the largest root of the characteristic polynomial, by Newton's method
   from above (it converges monotonically there, all roots being real);
2. its eigenvector by inverse iteration with the adjugate of
   `A - (lambda + shift) I` (an adjugate exists for singular matrices too,
   and its columns are the eigenvector when `lambda` is exact);
3. the eigenvalue again as the Rayleigh quotient of that vector.

Matrices are lists of n rows of n tensors of the batch's shape (n = 3, 4).
"""

from keras import ops

# Newton's steps for the largest eigenvalue, from the upper bound
# sqrt(sum_ij a_ij^2): quadratic once near, at least linear before.
NEWTON_STEPS = 10
# Inverse-iteration steps. Each shrinks the other eigenvectors' share by
# (error of lambda + shift) / gap: for a gap of 1e-3 of the trace, the
# error is below that of float32 `eigh` after 4.
REFINE_STEPS = 4
# Added to lambda (for a trace of 1): where two top eigenvalues tie, the
# shifted adjugate still points into their eigenspace.
SHIFT = 1e-4


def entries(m):
    """`(..., n, n)` -> n rows of n tensors `(...)`."""
    n = m.shape[-1]
    return [ops.unstack(row, n, axis=-1) for row in ops.unstack(m, n, axis=-2)]


def stack(rows):
    """n rows of n tensors `(...)` -> `(..., n, n)`."""
    return ops.stack([ops.stack(row, axis=-1) for row in rows], axis=-2)


def scatter(components, weights=None):
    """The entries of `sum_k w_k v_k v_k^T` over the last axis of the n
    component tensors `v[i] (..., k)` (weights `w (..., k)`, or ones):
    the symmetric matrix's distinct entries, each summed once."""
    weighted = components if weights is None else [weights * c for c in components]
    n = len(components)
    rows = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(i, n):
            rows[i][j] = rows[j][i] = ops.sum(weighted[i] * components[j], axis=-1)
    return rows


def trace_normalized(a, usable):
    """`a` over its trace where `usable` (booleans of the batch's shape),
    `I / n` elsewhere: the trace-1 matrices `top_eigenpair` takes."""
    n = len(a)
    trace = sum(a[i][i] for i in range(n))
    scale = ops.where(usable, trace, 1.0)
    return [
        [ops.where(usable, x / scale, float(i == j) / n) for j, x in enumerate(row)]
        for i, row in enumerate(a)
    ]


def adjugate(a):
    """The adjugate and determinant of a symmetric 3x3 or 4x4 matrix
    (entries): `adjugate(a) @ a = det(a) I`."""
    return _adjugate3(a) if len(a) == 3 else _adjugate4(a)


def _adjugate3(a):
    (a00, a01, a02), (_, a11, a12), (_, _, a22) = a
    b00 = a11 * a22 - a12 * a12
    b01 = a02 * a12 - a01 * a22
    b02 = a01 * a12 - a02 * a11
    b11 = a00 * a22 - a02 * a02
    b12 = a01 * a02 - a00 * a12
    b22 = a00 * a11 - a01 * a01
    det = a00 * b00 + a01 * b01 + a02 * b02
    return [[b00, b01, b02], [b01, b11, b12], [b02, b12, b22]], det


def _adjugate4(a):
    """The 4x4 adjugate.

    By the 2x2 minors of the first two and the last two rows (Laplace's
    expansion): about 100 multiplications and additions instead of 16 3x3
    determinants.
    """
    (a00, a01, a02, a03), (_, a11, a12, a13), (_, _, a22, a23), (_, _, _, a33) = a
    s0 = a00 * a11 - a01 * a01
    s1 = a00 * a12 - a01 * a02
    s2 = a00 * a13 - a01 * a03
    s3 = a01 * a12 - a11 * a02
    s4 = a01 * a13 - a11 * a03
    s5 = a02 * a13 - a12 * a03
    c5 = a22 * a33 - a23 * a23
    c4 = a12 * a33 - a13 * a23
    c3 = a12 * a23 - a13 * a22
    c2 = a02 * a33 - a03 * a23
    c1 = a02 * a23 - a03 * a22
    c0 = a02 * a13 - a03 * a12
    det = s0 * c5 - s1 * c4 + s2 * c3 + s3 * c2 - s4 * c1 + s5 * c0
    b00 = a11 * c5 - a12 * c4 + a13 * c3
    b01 = -a01 * c5 + a02 * c4 - a03 * c3
    b02 = a13 * s5 - a23 * s4 + a33 * s3
    b03 = -a12 * s5 + a22 * s4 - a23 * s3
    b11 = a00 * c5 - a02 * c2 + a03 * c1
    b12 = -a03 * s5 + a23 * s2 - a33 * s1
    b13 = a02 * s5 - a22 * s2 + a23 * s1
    b22 = a03 * s4 - a13 * s2 + a33 * s0
    b23 = -a02 * s4 + a12 * s2 - a23 * s0
    b33 = a02 * s3 - a12 * s1 + a22 * s0
    rows = [
        [b00, b01, b02, b03],
        [b01, b11, b12, b13],
        [b02, b12, b22, b23],
        [b03, b13, b23, b33],
    ]
    return rows, det


def dot(u, v):
    return sum(x * y for x, y in zip(u, v))


def matvec(m, v):
    """`m @ v` for entries `m` and a list of n tensors `v`."""
    return [dot(row, v) for row in m]


def normalize(v):
    norm = ops.sqrt(dot(v, v) + 1e-30)
    return [x / norm for x in v]


def shifted(a, value):
    """`a - value I`."""
    return [[x - value if i == j else x for j, x in enumerate(row)] for i, row in enumerate(a)]


def top_eigenpair(a):
    """`(lambda, v)`: the largest eigenvalue of `a` (entries of a symmetric
    PSD 3x3 or 4x4 matrix of trace 1) and a unit eigenvector of it (a list
    of n tensors).

    Accurate to float32 (about 1e-7) where the top eigenvalue is apart from
    the next by more than 1e-3 of the trace (float32 `eigh`: 2e-6 there);
    closer, to the conditioning of the problem itself. Tied top eigenvalues
    give a unit vector of their eigenspace.
    """
    n = len(a)
    squares = sum(x * x for row in a for x in row)
    adj, det = adjugate(a)
    # The characteristic polynomial, highest power first: lambda^n -
    # e1 lambda^(n-1) + e2 lambda^(n-2) - ..., with e1 = trace = 1, e2 the
    # sum of the principal 2x2 minors, e_(n-1) the adjugate's trace and
    # e_n the determinant.
    e2 = 0.5 * (1.0 - squares)
    if n == 3:
        coefficients = [1.0, -1.0, e2, -det]
    else:
        coefficients = [1.0, -1.0, e2, -sum(adj[i][i] for i in range(n)), det]
    value = ops.sqrt(squares)  # >= the largest eigenvalue
    for _ in range(NEWTON_STEPS):
        p, slope = coefficients[0], 0.0
        for c in coefficients[1:]:  # Horner's scheme for p and its slope
            slope = slope * value + p
            p = p * value + c
        # Above the largest root the slope is positive; it is 0 only where
        # roots meet, where the step is not taken.
        value = value - ops.where(slope > 0, p / ops.where(slope > 0, slope, 1.0), 0.0)
    inverse, _ = adjugate(shifted(a, value + SHIFT))
    # The column of the largest diagonal entry: the one that holds the
    # eigenvector most strongly.
    diagonal = ops.stack([ops.abs(inverse[i][i]) for i in range(n)], axis=-1)
    pick = ops.unstack(ops.one_hot(ops.argmax(diagonal, axis=-1), n, dtype=det.dtype), n, axis=-1)
    v = normalize(matvec(inverse, pick))
    for _ in range(REFINE_STEPS):
        v = normalize(matvec(inverse, v))
    # Again from the Rayleigh quotient, far closer to the eigenvalue than
    # Newton's steps on the polynomial's float32 coefficients where the gap
    # is small.
    inverse, _ = adjugate(shifted(a, dot(v, matvec(a, v)) + SHIFT))
    for _ in range(REFINE_STEPS):
        v = normalize(matvec(inverse, v))
    return dot(v, matvec(a, v)), v
