"""Reference matrix-capsule layers (Hinton, Sabour & Frosst, 2018) in float64."""

import numpy as np

from tests.reference.conv import conv2d
from tests.reference.conv_capsule import windows


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def matrix_votes(poses, kernel):
    """`poses (..., 16)` as row-major 4x4 `M`, `kernel (..., 4, 4)`: `M @ W` flat."""
    m = poses.reshape(*poses.shape[:-1], 4, 4)
    return np.matmul(m, kernel).reshape(*np.broadcast_shapes(m.shape, kernel.shape)[:-2], 16)


def conv_matrix_capsule(poses, activations, kernel, kernel_size, strides, padding, route):
    """Window children vote `M[p*s+o, t] @ W[o, t, j]`; routed per window."""
    w = windows(poses, kernel_size, strides, padding)  # (b, H', W', K, T, 16)
    a = windows(activations, kernel_size, strides, padding)  # (b, H', W', K, T)
    batch, oh, ow, k, types, _ = w.shape
    n_out = kernel.shape[3]
    kernel = kernel.reshape(k, types, n_out, 4, 4)
    votes = np.zeros((batch, oh, ow, k, types, n_out, 16))
    for j in range(n_out):
        votes[..., j, :] = matrix_votes(w, kernel[:, :, j])
    votes = votes.reshape(-1, k * types, n_out, 16)
    parent_poses, parent_activations = route(votes, a.reshape(-1, k * types))[:2]
    return (
        parent_poses.reshape(batch, oh, ow, n_out, 16),
        parent_activations.reshape(batch, oh, ow, n_out),
    )


def class_matrix_capsule(poses, activations, kernel, route, coordinate_addition=True):
    """Each child votes `M[h, w, t] @ W[t, c]`, plus its scaled centre."""
    batch, height, width, types, _ = poses.shape
    n_classes = kernel.shape[1]
    votes = np.zeros((batch, height, width, types, n_classes, 16))
    for h in range(height):
        for w in range(width):
            for c in range(n_classes):
                votes[:, h, w, :, c] = matrix_votes(poses[:, h, w], kernel[:, c])
                if coordinate_addition:
                    votes[:, h, w, :, c, 3] += (h + 0.5) / height
                    votes[:, h, w, :, c, 7] += (w + 0.5) / width
    votes = votes.reshape(batch, -1, n_classes, 16)
    return route(votes, activations.reshape(batch, -1))[:2]


def primary_matrix_capsule(
    images, pose_kernel, pose_bias, act_kernel, act_bias, strides=(1, 1), padding="valid"
):
    """Pose and activation convolutions (loops over positions), regrouped."""
    n = act_kernel.shape[-1]
    poses = conv2d(images, pose_kernel, strides, padding) + pose_bias
    acts = conv2d(images, act_kernel, strides, padding) + act_bias
    return poses.reshape(*poses.shape[:3], n, -1), sigmoid(acts)
