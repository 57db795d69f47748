"""MNIST digits on a 40x40 canvas: translated (training, clean test) and
affine-transformed the way affNIST was made (Sabour et al. 2017, section 5.2).

affNIST (Tieleman, 2013, www.cs.toronto.edu/~tijmen/affNIST) transforms
each MNIST digit by a random rotation of at most 20 degrees, a shear of at
most 0.2, independent horizontal and vertical scalings by 0.8-1.2, and a
translation inside the 40x40 image. `affine_test_set` draws the same
ranges from a seed, so that set is the same for every run and backend;
affNIST itself is not redistributed with TFDS. Every function works on
whole batches `(N, 28, 28, 1)` or `(N, 40, 40, 1)` at once.
"""

import numpy as np
import tensorflow as tf

CANVAS = 40
DIGIT = 28
MAX_SHIFT = (CANVAS - DIGIT) // 2  # 6: a centred digit moves up to 6 px each way
AFFNIST_RANGES = {
    "rotation_degrees": 20.0,  # uniform in [-20, 20]
    "shear": 0.2,  # uniform in [-0.2, 0.2]
    "scale": (0.8, 1.2),  # horizontal and vertical, each uniform
}


def centre_on_canvas(digits):
    """`(N, 28, 28, 1)` digits centred on a zero `(N, 40, 40, 1)` canvas."""
    pad = [[0, 0], [MAX_SHIFT, MAX_SHIFT], [MAX_SHIFT, MAX_SHIFT], [0, 0]]
    return tf.pad(tf.convert_to_tensor(digits, tf.float32), pad)


def warp(images, transforms, interpolation="BILINEAR"):
    """Each image resampled by its `(8,)` projective transform: output pixel
    `(x, y)` reads input `(a0 x + a1 y + a2, b0 x + b1 y + b2)`, zero outside."""
    images = tf.convert_to_tensor(images, tf.float32)
    warped = tf.raw_ops.ImageProjectiveTransformV3(
        images=images,
        transforms=tf.convert_to_tensor(transforms, tf.float32),
        output_shape=tf.shape(images)[1:3],
        fill_value=0.0,
        interpolation=interpolation,
        fill_mode="CONSTANT",
    )
    return tf.ensure_shape(warped, images.shape)  # the op drops the static shape


def shift(images, dx, dy):
    """Each image moved right by `dx[i]` and down by `dy[i]` whole pixels."""
    dx, dy = tf.cast(dx, tf.float32), tf.cast(dy, tf.float32)
    ones, zeros = tf.ones_like(dx), tf.zeros_like(dx)
    transforms = tf.stack([ones, zeros, -dx, zeros, ones, -dy, zeros, zeros], axis=1)
    return warp(images, transforms, "NEAREST")


def random_translation(digits):
    """A training batch: each digit at a uniformly random position on the
    canvas (up to 6 px from the centre each way; translation only, as in
    the paper). `tf.random`, so `keras.utils.set_random_seed` fixes it."""
    count = tf.shape(digits)[0]
    dx = tf.random.uniform((count,), -MAX_SHIFT, MAX_SHIFT + 1, tf.int32)
    dy = tf.random.uniform((count,), -MAX_SHIFT, MAX_SHIFT + 1, tf.int32)
    return shift(centre_on_canvas(digits), dx, dy)


def translated_test_set(digits, seed):
    """The clean test images: each digit at a random position on the canvas,
    drawn from `seed` (the same set on every run)."""
    rng = np.random.default_rng(seed)
    dx, dy = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, (2, len(digits)))
    return shift(centre_on_canvas(digits), dx, dy).numpy()


def affine_matrices(count, rng):
    """`count` forward 2x2 maps `rotation @ shear @ scale`, affNIST's ranges."""
    angle = np.deg2rad(rng.uniform(-1, 1, count) * AFFNIST_RANGES["rotation_degrees"])
    shear = rng.uniform(-1, 1, count) * AFFNIST_RANGES["shear"]
    sx, sy = rng.uniform(*AFFNIST_RANGES["scale"], (2, count))
    cos, sin, zero, one = np.cos(angle), np.sin(angle), np.zeros(count), np.ones(count)
    rotation = np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], -2)
    shearing = np.stack([np.stack([one, shear], -1), np.stack([zero, one], -1)], -2)
    scaling = np.stack([np.stack([sx, zero], -1), np.stack([zero, sy], -1)], -2)
    return rotation @ shearing @ scaling


def about_centre(forward):
    """Projective transforms (output -> input) of forward 2x2 maps about the
    canvas centre."""
    inverse = np.linalg.inv(forward)
    c = (CANVAS - 1) / 2.0
    offset = c - inverse @ np.array([c, c])  # input = inverse @ (out - c) + c
    count = len(forward)
    return np.concatenate(
        [inverse[:, 0], offset[:, :1], inverse[:, 1], offset[:, 1:], np.zeros((count, 2))],
        axis=1,
    )


def bounding_boxes(images):
    """`(top, bottom, left, right)` of each image's non-zero pixels."""
    ink = np.asarray(images)[..., 0] > 0
    rows, cols = ink.any(axis=2), ink.any(axis=1)
    size = ink.shape[1]
    top, left = rows.argmax(axis=1), cols.argmax(axis=1)
    bottom = size - 1 - rows[:, ::-1].argmax(axis=1)
    right = size - 1 - cols[:, ::-1].argmax(axis=1)
    return top, bottom, left, right


def affine_test_set(digits, seed):
    """affNIST-style images of `digits`: each centred on the canvas, rotated,
    sheared and scaled about the centre by its draw from `seed`, then moved to
    a uniformly random position at which it lies wholly on the canvas."""
    rng = np.random.default_rng(seed)
    count = len(digits)
    warped = warp(centre_on_canvas(digits), about_centre(affine_matrices(count, rng))).numpy()
    top, bottom, left, right = bounding_boxes(warped)
    # Moves that keep the box on the canvas: -top ... CANVAS-1-bottom rows.
    u = rng.uniform(size=(2, count))
    dy = np.floor(u[0] * (CANVAS - bottom + top)).astype(int) - top
    dx = np.floor(u[1] * (CANVAS - right + left)).astype(int) - left
    return shift(warped, dx, dy).numpy()


def digits_and_labels(dataset, limit=None):
    """The `(image in [0, 1], label)` examples of a TFDS MNIST dataset as
    arrays `(N, 28, 28, 1)` float32 and `(N,)`."""
    if limit is not None:
        dataset = dataset.take(limit)
    images, labels = [], []
    for batch in dataset.batch(10_000).as_numpy_iterator():
        images.append(batch["image"].astype(np.float32) / 255.0)
        labels.append(batch["label"])
    return np.concatenate(images), np.concatenate(labels)
