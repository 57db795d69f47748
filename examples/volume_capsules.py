"""
Title: Volumes: 3-D capsules against a 3-D CNN
Description: Noisy volumes holding a blob of one of a few shapes (or none), or your own folder of NumPy volumes.
Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules", NeurIPS 2017.

Two models of about the same size train in the same run, at the same
budget (epochs, batch size, Adam's defaults):

- `capsules`: `Conv3D(16, 3, relu) -> PrimaryCapsule3D(8, 8, 3, strides=2,
  grid=True) -> ConvCapsule3D(8, 8, 3, strides=2)` (windowed dynamic
  routing) `-> Capsule(classes, 16) -> Length`, `MarginLoss`;
- `cnn`: `Conv3D(32, 3) -> max-pool 2 -> Conv3D(64, 3) -> max-pool 2 ->
  Conv3D(192, 3)` (padding "same", ReLU) `-> global max pooling -> Dense(128, relu) ->
  Dense(classes)`, cross-entropy.

Data: generated `--size`^3 volumes of Gaussian noise (standard deviation
`--noise`) holding nothing, a bright cube, a ball or a rod (a long box
along a random axis: vessel-like against the nodule-like cube and ball) of
random size at a random place, `--train` and `--test` of them; or
`--folder DIR`, a folder per class of NumPy volumes (`DIR/<class>/*.npy`,
each `(D, H, W)` or `(D, H, W, channels)`, all of one shape; read with
`allow_pickle=False`), the last `--test-fraction` of each class held out.

    KERAS_BACKEND=jax python examples/volume_capsules.py
    python examples/volume_capsules.py --folder my_volumes --epochs 20

Writes metrics.json (held-out accuracy, parameters, training seconds per
model) to --output-dir (default runs/volume_capsules/<backend>).
"""

import pathlib

import comparison
import keras
import numpy as np

import keras_capsules as kc

SHAPES = ("none", "cube", "ball", "rod")


def generated_volumes(count, size, noise, seed):
    """`count` volumes `(size, size, size, 1)` and their labels (`SHAPES`)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(SHAPES), count).astype("int32")
    grid = np.stack(np.meshgrid(*[np.arange(size)] * 3, indexing="ij"), -1)
    volumes = rng.normal(0, noise, (count, size, size, size, 1)).astype("float32")
    for n, label in enumerate(labels):
        if label == 0:
            continue
        radius = rng.uniform(0.1, 0.2) * size
        centre = rng.uniform(radius + 1, size - radius - 1, 3)
        offset = np.abs(grid - centre)
        if label == 1:
            inside = offset.max(-1) <= radius
        elif label == 2:
            inside = np.linalg.norm(offset, axis=-1) <= radius
        else:
            half = np.full(3, radius / 2)
            half[rng.integers(0, 3)] = size  # long along one axis
            inside = np.all(offset <= half, axis=-1)
        volumes[n, inside, 0] += 1.0
    return volumes, labels


def folder_volumes(directory, test_fraction):
    """Training and test volumes and labels of `DIR/<class>/*.npy`, and the
    class names (sorted). A file that is not a plain numeric array, or of
    another shape than the first, is a `ValueError` naming it."""
    root = pathlib.Path(directory)
    classes = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if len(classes) < 2:
        raise ValueError(
            "--folder must hold a folder of .npy volumes per class, at least two. "
            f"Received: --folder {directory} with classes {classes}"
        )
    splits = {"train": ([], []), "test": ([], [])}
    shape = None
    for label, name in enumerate(classes):
        paths = sorted((root / name).glob("*.npy"))
        if not paths:
            raise ValueError(f"No .npy volumes in {root / name}.")
        held_out = int(round(len(paths) * test_fraction))
        for index, path in enumerate(paths):
            try:
                volume = np.load(path, allow_pickle=False)
            except ValueError as error:  # object arrays need pickle: refused
                raise ValueError(f"{path} is not a plain NumPy array: {error}") from error
            if volume.ndim == 3:
                volume = volume[..., None]
            if volume.ndim != 4 or not np.issubdtype(volume.dtype, np.number):
                raise ValueError(
                    f"{path} must be a numeric (D, H, W) or (D, H, W, channels) volume. "
                    f"Received: shape {volume.shape}, dtype {volume.dtype}"
                )
            if shape is None:
                shape = volume.shape
            elif volume.shape != shape:
                raise ValueError(f"{path} has shape {volume.shape}; the volumes before it {shape}.")
            split = "test" if index >= len(paths) - held_out else "train"
            splits[split][0].append(volume.astype("float32"))
            splits[split][1].append(label)
    (x, y), (x_test, y_test) = splits["train"], splits["test"]
    if not x_test:
        raise ValueError(
            f"--test-fraction {test_fraction} holds out no volume. Received: --folder {directory}"
        )
    return np.stack(x), np.array(y, "int32"), np.stack(x_test), np.array(y_test, "int32"), classes


def capsule_model(shape, num_classes):
    volumes = keras.Input(shape)
    x = keras.layers.Conv3D(16, 3, activation="relu")(volumes)
    x = kc.PrimaryCapsule3D(8, 8, 3, strides=2, grid=True)(x)
    x = kc.ConvCapsule3D(8, 8, 3, strides=2)(x)
    x = keras.layers.Reshape((-1, 8))(x)
    scores = kc.Length()(kc.Capsule(num_classes, 16)(x))
    model = keras.Model(volumes, scores, name="capsules")
    model.compile(optimizer="adam", loss=kc.MarginLoss(), metrics=["accuracy"])
    return model


def cnn_model(shape, num_classes):
    volumes = keras.Input(shape)
    # Pooling rather than strided convolutions: XLA's CPU gradient of a
    # strided 3-D convolution is ~400x slower than the rest (benchmarks/).
    x = keras.layers.Conv3D(32, 3, padding="same", activation="relu")(volumes)
    x = keras.layers.MaxPooling3D(2)(x)
    x = keras.layers.Conv3D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling3D(2)(x)
    x = keras.layers.Conv3D(192, 3, padding="same", activation="relu")(x)
    x = keras.layers.Dense(128, activation="relu")(keras.layers.GlobalMaxPooling3D()(x))
    logits = keras.layers.Dense(num_classes)(x)
    model = keras.Model(volumes, logits, name="cnn")
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def main(argv=None):
    parser = comparison.argument_parser(__doc__, epochs=5, batch_size=16)
    parser.add_argument("--folder", help="a folder of .npy volumes per class")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--size", type=int, default=24, help="generated volumes' side")
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--train", type=int, default=2000, help="generated training volumes")
    parser.add_argument("--test", type=int, default=500, help="generated test volumes")
    args = comparison.parse_args(parser, argv)
    if not 0 < args.test_fraction < 1:
        parser.error(f"--test-fraction must be in (0, 1). Received: {args.test_fraction}")
    if args.folder:
        x, y, x_test, y_test, classes = folder_volumes(args.folder, args.test_fraction)
    else:
        x, y = generated_volumes(args.train, args.size, args.noise, args.seed)
        x_test, y_test = generated_volumes(args.test, args.size, args.noise, args.seed + 1)
        classes = list(SHAPES)
    return comparison.compare(
        {
            "capsules": lambda: capsule_model(x.shape[1:], len(classes)),
            "cnn": lambda: cnn_model(x.shape[1:], len(classes)),
        },
        train=comparison.Data(x, y),
        test=comparison.Data(x_test, y_test),
        budget=comparison.Budget.from_args(args),
        output_dir=comparison.output_dir(args, "volume_capsules"),
        seed=args.seed,
        results={
            "backend": keras.backend.backend(),
            "data": args.folder and "folder" or "generated",
            "classes": classes,
            "shape": list(x.shape[1:]),
            "train": len(x),
            "test": len(x_test),
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "seed": args.seed,
        },
    )


if __name__ == "__main__":
    main()
