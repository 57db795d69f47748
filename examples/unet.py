"""A U-Net of the usual shape, the baseline of the segmentation examples."""

import keras


def unet(input_shape, num_classes=1, filters=(16, 32, 64, 128), batch_norm=False, name="unet"):
    """U-Net (Ronneberger et al. 2015) with public Keras layers.

    `len(filters)` levels, `filters[i]` channels at level `i`. Each level:
    two 3x3 `Conv2D` ("same" padding) + ReLU (with `batch_norm`, a
    `BatchNormalization` between each convolution and its ReLU); down by
    2x2 max pooling; up by a 2x2 stride-2 `Conv2DTranspose`, concatenated
    with the level's skip connection. A final 1x1 `Conv2D` with a sigmoid
    gives per-pixel scores `(batch, H, W, num_classes)` in (0, 1). `H` and
    `W` must be divisible by `2 ** (len(filters) - 1)`.

    Unlike the paper's valid convolutions (a 572x572 input, 388x388
    output), "same" padding keeps the output the size of the input.
    Parameters with the default filters: 481,745 for `(64, 64, 1)` inputs
    and 482,033 for `(64, 64, 3)` (483,857 and 484,145 with `batch_norm`,
    1,408 of them the normalisations' moving statistics).

    Reference: Ronneberger, Fischer & Brox, "U-Net: Convolutional Networks
    for Biomedical Image Segmentation", MICCAI 2015, arXiv:1505.04597.
    """
    if len(filters) < 1:
        raise ValueError(f"unet needs at least one level. Received: filters={filters}")
    levels = len(filters) - 1
    if any(size is None or size % 2**levels for size in input_shape[:2]):
        raise ValueError(
            f"unet needs a height and width divisible by 2 ** (len(filters) - 1) = "
            f"{2**levels}. Received: input_shape={tuple(input_shape)}"
        )

    def block(x, width):
        for _ in range(2):
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=not batch_norm)(x)
            if batch_norm:
                x = keras.layers.BatchNormalization()(x)
            x = keras.layers.ReLU()(x)
        return x

    images = keras.Input(input_shape)
    x, skips = images, []
    for width in filters[:-1]:
        x = block(x, width)
        skips.append(x)
        x = keras.layers.MaxPooling2D(2)(x)
    x = block(x, filters[-1])
    for width, skip in zip(reversed(filters[:-1]), reversed(skips)):
        x = keras.layers.Conv2DTranspose(width, 2, strides=2)(x)
        x = block(keras.layers.Concatenate()([x, skip]), width)
    scores = keras.layers.Conv2D(num_classes, 1, activation="sigmoid")(x)
    return keras.Model(images, scores, name=name)
