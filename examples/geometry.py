"""Rotations and voxel grids of point clouds, for the examples' rotation
studies (point clouds and volumes trained aligned or rotated, tested under
random rotations and at fixed angles).

Rotations are `(count, 3, 3)` matrices acting on row vectors: a cloud
`(n, 3)` turns into `cloud @ rotation`. NumPy only.
"""

import numpy as np

AXES = {"x": 0, "y": 1, "z": 2}


def random_rotations(rng, count):
    """`count` rotation matrices uniform over SO(3) (QR of Gaussian
    matrices, signs fixed so that the distribution is Haar)."""
    q, r = np.linalg.qr(rng.normal(size=(count, 3, 3)))
    q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
    q[np.linalg.det(q) < 0, :, 0] *= -1
    return q


def axis_rotation(axis, degrees):
    """The rotation by `degrees` about `axis` (`"x"`, `"y"` or `"z"`),
    `(3, 3)`: about `z` turns a digit at `z = 0` in its plane, about `x`
    tilts it out of it."""
    i, j = [k for k in range(3) if k != AXES[axis]]
    angle = np.deg2rad(degrees)
    m = np.eye(3)
    m[i, i] = m[j, j] = np.cos(angle)
    m[i, j], m[j, i] = np.sin(angle), -np.sin(angle)
    return m


def rotate(clouds, rotations):
    """`clouds (N, n, 3)` each turned by its rotation (`(N, 3, 3)`, or one
    `(3, 3)` for all), float32."""
    rotations = np.broadcast_to(rotations, (len(clouds), 3, 3))
    return np.einsum("bnd,bde->bne", clouds, rotations).astype("float32")


def randomly_rotated(clouds, rng):
    """`clouds` each under its own uniform random rotation."""
    return rotate(clouds, random_rotations(rng, len(clouds)))


def at_fixed_angles(clouds, angles):
    """`{name: clouds turned}` for every angle of `angles` (degrees) about
    `z` (`in_plane_<angle>`: a digit at `z = 0` turns in its plane, as in
    rotated MNIST) and about `x` (`out_of_plane_<angle>`: it tilts)."""
    return {
        f"{name}_{angle:g}": rotate(clouds, axis_rotation(axis, angle))
        for axis, name in (("z", "in_plane"), ("x", "out_of_plane"))
        for angle in angles
    }


def rotation_test_sets(clouds, labels, rng, angles, curve_test):
    """The test sets of a rotation study, `{name: (clouds, labels)}`:
    `aligned`, `rotated` (each cloud under a uniform random rotation drawn
    from `rng`) and, for the first `curve_test` clouds, `at_fixed_angles`."""
    tests = {"aligned": (clouds, labels), "rotated": (randomly_rotated(clouds, rng), labels)}
    for name, turned in at_fixed_angles(clouds[:curve_test], angles).items():
        tests[name] = (turned, labels[:curve_test])
    return tests


def voxelize(clouds, size):
    """Occupancy grids `(N, size, size, size, 1)` float32 of clouds whose
    points lie in `[-1, 1]^3`: a cell is 1 where a point falls in it
    (points outside are clipped to the border cells). Axes in the order
    `x, y, z`. One `bincount` for every cloud, no loop over them."""
    clouds = np.asarray(clouds)
    n = len(clouds)
    cells = np.clip(np.floor((clouds + 1.0) / 2.0 * size), 0, size - 1).astype(np.int64)
    flat = (cells[..., 0] * size + cells[..., 1]) * size + cells[..., 2]
    flat = flat + np.arange(n)[:, None] * size**3
    counts = np.bincount(flat.ravel(), minlength=n * size**3)
    return (counts > 0).astype("float32").reshape(n, size, size, size, 1)
