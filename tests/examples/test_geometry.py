"""The examples' rotations and voxel grids (examples/geometry.py)."""

import numpy as np
import pytest

from tests.examples.test_scripts import example

pytestmark = pytest.mark.one_backend  # NumPy only


def test_random_rotations_are_proper_rotations():
    rotations = example("geometry").random_rotations(np.random.default_rng(0), 500)
    np.testing.assert_allclose(
        rotations @ rotations.transpose(0, 2, 1), np.eye(3)[None].repeat(500, 0), atol=1e-12
    )
    np.testing.assert_allclose(np.linalg.det(rotations), 1.0)
    # Uniform over SO(3): the rotated z axis is uniform on the sphere.
    assert abs(rotations[:, 2, 2].mean()) < 0.1 and abs(rotations[:, 2, 2].var() - 1 / 3) < 0.05


def test_axis_rotations_turn_in_the_plane_and_tilt_out_of_it():
    geometry = example("geometry")
    x, y, z = np.eye(3)
    np.testing.assert_allclose(x @ geometry.axis_rotation("z", 90), y, atol=1e-12)
    np.testing.assert_allclose(y @ geometry.axis_rotation("x", 90), z, atol=1e-12)
    np.testing.assert_allclose(z @ geometry.axis_rotation("z", 37), z, atol=1e-12)
    clouds = np.random.default_rng(0).normal(size=(2, 5, 3))
    turned = geometry.rotate(clouds, geometry.axis_rotation("y", 180))
    np.testing.assert_allclose(turned, clouds * [-1, 1, -1], atol=1e-6)


def test_voxelize_marks_the_cells_that_hold_points():
    geometry = example("geometry")
    clouds = np.array(
        [[[-1.0, -1.0, -1.0], [0.99, 0.99, 0.99], [0.0, 0.0, 0.0], [0.01, 0.01, 0.01]],
         [[2.0, -3.0, 0.6], [2.0, -3.0, 0.6], [2.0, -3.0, 0.6], [2.0, -3.0, 0.6]]],
        "float32",
    )  # fmt: skip
    grids = geometry.voxelize(clouds, 4)
    assert grids.shape == (2, 4, 4, 4, 1) and grids.dtype == np.float32
    expected = np.zeros((2, 4, 4, 4))
    expected[0, 0, 0, 0] = expected[0, 3, 3, 3] = expected[0, 2, 2, 2] = 1
    expected[1, 3, 0, 3] = 1  # outside: the border cells
    np.testing.assert_array_equal(grids[..., 0], expected)


def test_rotation_test_sets_name_every_test():
    geometry = example("geometry")
    clouds = np.random.default_rng(0).normal(size=(5, 7, 3)).astype("float32")
    labels = np.arange(5)
    tests = geometry.rotation_test_sets(clouds, labels, np.random.default_rng(1), [0, 90], 3)
    assert list(tests) == ["aligned", "rotated", "in_plane_0", "in_plane_90", "out_of_plane_0",
                           "out_of_plane_90"]  # fmt: skip
    np.testing.assert_array_equal(tests["aligned"][0], clouds)
    expected = geometry.randomly_rotated(clouds, np.random.default_rng(1))
    np.testing.assert_array_equal(tests["rotated"][0], expected)
    np.testing.assert_allclose(tests["in_plane_0"][0], clouds[:3], atol=1e-6)
    np.testing.assert_array_equal(tests["out_of_plane_90"][1], labels[:3])
