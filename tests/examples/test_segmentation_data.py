"""The segmentation examples' data (digit canvases, Oxford-IIIT Pets masks,
the foreground weight) on mock TFDS data, and the U-Net baseline."""

import numpy as np
import pytest

from tests.examples.test_scripts import example, same_on_every_backend


def batches(dataset):
    """A dataset of `(images, masks)` batches as two concatenated arrays."""
    images, masks = zip(*((np.asarray(x), np.asarray(y)) for x, y in dataset))
    return np.concatenate(images), np.concatenate(masks)


def mock(num_examples, **kwargs):
    import tensorflow_datasets as tfds

    # The default policy, AUTO: the wheel has no metadata files, so the
    # fake examples come from the dataset's code (features), offline.
    return tfds.testing.mock_data(num_examples=num_examples, **kwargs)


@same_on_every_backend
def test_place_digits_puts_each_digit_at_its_corner_and_combines_by_max():
    import tensorflow as tf

    data = example("data")
    digits = np.zeros((3, 28, 28, 1), "float32")
    digits[0, 0, 0], digits[0, 27, 27] = 0.3, 0.4  # the corners of digit 0
    digits[1, 0, 0] = 0.8
    digits[2, 5, 5] = 1.0  # left out below
    offsets = tf.constant([[2, 3], [2, 3], [0, 0]])
    canvas = np.asarray(
        data.place_digits(tf.constant(digits), offsets, tf.constant([True, True, False]), 32)
    )
    assert canvas.shape == (32, 32, 1)
    expected = np.zeros((32, 32, 1), "float32")
    expected[2, 3], expected[29, 30] = 0.8, 0.4  # max(0.3, 0.8) where they overlap
    np.testing.assert_array_equal(canvas, expected)


@same_on_every_backend
def test_digit_canvases_shapes_masks_and_noise():
    data = example("data")
    with mock(10):
        noisy = data.digit_canvases("test", 4, canvas_size=40, noise=0.2, training=False)
        clean = data.digit_canvases("test", 4, canvas_size=40, noise=0.0, training=False)
        images, masks = batches(noisy)
        clean_images, clean_masks = batches(clean)
        again = batches(noisy)
    assert images.shape == masks.shape == (10, 40, 40, 1)
    assert images.dtype == masks.dtype == np.float32
    assert images.min() >= 0 and images.max() <= 1
    assert set(np.unique(masks)) == {0.0, 1.0}
    # The same canvases with and without noise: the mask is the noiseless
    # digits' pixels above 0.5, and the noise adds U(0, 0.2) (clipped to 1).
    np.testing.assert_array_equal(masks, clean_masks)
    np.testing.assert_array_equal(masks, (clean_images > 0.5).astype("float32"))
    grain = images - clean_images
    assert grain.min() >= 0 and grain.max() <= 0.2 + 1e-6
    assert grain.max() > 0.15 and np.all(images[clean_images == 1] == 1)
    # The test canvases are the same in every pass (and run: stateless RNG).
    for a, b in zip(again, (images, masks)):
        np.testing.assert_array_equal(a, b)


@same_on_every_backend
def test_one_digit_canvases_keep_the_digit_in_a_28_pixel_window():
    data = example("data")
    with mock(6):
        _, masks = batches(data.digit_canvases("test", 6, max_digits=1, training=False))
    for mask in masks[..., 0]:
        rows, cols = np.nonzero(mask)
        assert rows.size > 0
        assert rows.max() - rows.min() < 28 and cols.max() - cols.min() < 28


@same_on_every_backend
def test_digit_canvases_training_passes_differ_and_repeat_by_seed():
    data = example("data")
    with mock(8):

        def train(seed, **kwargs):
            return data.digit_canvases("train", 3, seed=seed, num_examples=10, noise=0.0, **kwargs)

        two_epochs = batches(train(1, order=data.EpochOrder(1, 0, 2)))[0]
        first, second = two_epochs[:10], two_epochs[10:]
        rerun, other = batches(train(1))[0], batches(train(2))[0]
    assert first.shape == (10, 64, 64, 1)  # num_examples canvases, cycling the 8 digits
    assert not np.array_equal(first, second)  # new places each pass
    np.testing.assert_array_equal(first, rerun)  # the same passes with the same seed
    assert not np.array_equal(first, other)


@same_on_every_backend
def test_digit_canvases_gaussian_noise_and_bad_arguments():
    data = example("data")
    with mock(4):
        images, masks = batches(
            data.digit_canvases("test", 4, noise=0.1, noise_type="gaussian", training=False)
        )
        assert images.min() == 0 and images.max() <= 1
        assert set(np.unique(masks)) == {0.0, 1.0}
        for bad in ({"canvas_size": 27}, {"max_digits": 0}, {"noise_type": "salt"}):
            with pytest.raises(ValueError, match=next(iter(bad))):
                data.digit_canvases("test", 4, training=False, **bad)


@same_on_every_backend
def test_oxford_pets_masks_are_the_pet_pixels_of_the_trimap():
    import tensorflow as tf

    data = example("data")
    # max_value=4: fake trimaps of 0-3 (the real ones are 1-3); images and
    # masks of random, different sizes.
    with mock(5, max_value=4):
        images, masks = batches(
            data.oxford_pets_segmentation("test", 2, image_size=16, training=False)
        )
        raw = list(data.load_split("oxford_iiit_pet", "test"))
        flipped = batches(data.oxford_pets_segmentation("train", 2, image_size=16))
    assert images.shape == (5, 16, 16, 3) and masks.shape == (5, 16, 16, 1)
    assert images.dtype == masks.dtype == np.float32
    assert images.min() >= 0 and images.max() <= 1
    assert set(np.unique(masks)) == {0.0, 1.0}
    for mask, example_ in zip(masks, raw):
        trimap = np.asarray(tf.image.resize(example_["segmentation_mask"], (16, 16), "nearest"))
        assert np.all(mask[trimap == 1] == 1)  # pet
        assert np.all(mask[(trimap == 2) | (trimap == 3)] == 0)  # background and border
    assert flipped[0].shape == (5, 16, 16, 3) and set(np.unique(flipped[1])) <= {0.0, 1.0}


@same_on_every_backend
def test_oxford_pets_flip_moves_image_and_mask_together():
    import tensorflow as tf

    data = example("data")
    mask = tf.constant(np.random.default_rng(0).integers(0, 2, (8, 8, 1)), tf.float32)
    image = tf.concat([mask, 2 * mask, 3 * mask], axis=-1)
    flips = set()
    for seed in range(20):
        flipped = data._flip_both((image, mask), tf.constant([seed, 0], tf.int64))
        flipped_image, flipped_mask = (np.asarray(t) for t in flipped)
        np.testing.assert_array_equal(flipped_image, flipped_mask * [1, 2, 3])
        flips.add(np.array_equal(flipped_mask, np.asarray(mask)))
    assert flips == {True, False}  # both flipped and not


@same_on_every_backend
def test_foreground_weight_is_background_over_foreground():
    import tensorflow as tf

    data = example("data")
    masks = np.zeros((6, 4, 4, 1), "float32")
    masks[:, :2, :2] = 1  # 4 of 16 pixels
    masks[4:, :, :] = 1  # the last batch all foreground, beyond max_batches below
    ds = tf.data.Dataset.from_tensor_slices((masks, masks)).batch(2)
    assert data.foreground_weight(ds, max_batches=2) == pytest.approx(12 / 4)
    assert data.foreground_weight(ds) == pytest.approx((96 - 48) / 48)
    empty = tf.data.Dataset.from_tensor_slices((masks, 0 * masks)).batch(2)
    assert data.foreground_weight(empty) == 1.0


@pytest.mark.one_backend("torch")  # what it learns: tests/test_learning.py
def test_unet_shapes_and_learning():
    import keras

    unet = example("unet").unet
    model = unet((16, 16, 3), num_classes=2, filters=(4, 8, 8), batch_norm=True)
    assert tuple(model.output.shape) == (None, 16, 16, 2)
    scores = keras.ops.convert_to_numpy(model(np.zeros((2, 16, 16, 3), "float32")))
    assert scores.shape == (2, 16, 16, 2) and np.all((scores > 0) & (scores < 1))
    with pytest.raises(ValueError, match="divisible by"):
        unet((10, 16, 1), filters=(4, 8, 8))  # 10 is not a multiple of 4

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    # The foreground: the pixels above 0. Centred inputs keep the net from
    # starting saturated at "all foreground". No batch norm: its moving
    # statistics would lag behind in 30 steps.
    images = rng.uniform(-1, 1, (16, 16, 16, 1)).astype("float32")
    masks = (images > 0).astype("float32")
    model = unet((16, 16, 1), filters=(4, 8))
    model.compile(keras.optimizers.Adam(1e-2), "binary_crossentropy")
    history = model.fit(images, masks, batch_size=8, epochs=15, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)) and history[-1] < 0.75 * history[0], history
    predicted = np.asarray(model.predict(images, verbose=0)) > 0.5
    assert (predicted == (masks > 0.5)).mean() > 0.75  # half the pixels are foreground
