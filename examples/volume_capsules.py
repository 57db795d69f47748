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

Or `--mnist`: MNIST digits as volumes, the rotation study. Each digit is a
point set of its foreground pixels (`data.digit_point_clouds`, `--points`
of them) given a thickness (`z` uniform in `+-thickness`), scaled to fit
the grid under any rotation and voxelised into a `--size`^3 occupancy
grid; a rotated digit is the voxelised rotated point set (no
interpolation). Each model trains on aligned digits (`--regimes aligned`)
and with a new uniform random 3-D rotation of every digit at every epoch
(`rotated`), and is tested on the aligned test digits, on the same digits
under random 3-D rotations, and, for the first `--curve-test` of them, at
the fixed angles `--angles` in the digit's plane (about `z`, rotated
MNIST) and out of it (about `x`): `accuracy_by_angle.png`.

    KERAS_BACKEND=jax python examples/volume_capsules.py
    python examples/volume_capsules.py --folder my_volumes --epochs 20
    KERAS_BACKEND=jax python examples/volume_capsules.py --mnist --size 20 --train 10000

Writes metrics.json (held-out accuracy, parameters, training seconds per
model) to --output-dir (default runs/volume_capsules/<backend>), after each
model; `--resume` goes on from the models a stopped run finished.
"""

import os
import pathlib

import comparison
import data
import geometry
import keras
import numpy as np

import keras_capsules as kc

SHAPES = ("none", "cube", "ball", "rod")
MODELS = ("capsules", "cnn")
REGIMES = ("aligned", "rotated")


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


def mnist_digits(args):
    """Training and test digits as thickened point sets in the unit ball
    (so that every rotation stays in the grid), and their labels."""
    splits = []
    for split, count, seed in (
        ("train", args.train, args.seed),
        ("test", args.test, args.seed + 1),
    ):
        clouds, labels = data.mnist_point_clouds(
            f"{split}[:{count}]", args.points, seed, data_dir=args.data_dir
        )
        rng = np.random.default_rng(seed + 100)
        clouds[..., 2] = rng.uniform(-args.thickness, args.thickness, clouds.shape[:2])
        splits += [clouds / np.sqrt(2.0 + args.thickness**2), labels]
    return splits


def rotation_tests(clouds, labels, args):
    """The test sets of the rotation study, voxelised: `{name: Data}`."""
    rng = np.random.default_rng(args.seed + 2)
    tests = geometry.rotation_test_sets(clouds, labels, rng, args.angles, args.curve_test)
    return {k: comparison.Data(geometry.voxelize(c, args.size), y) for k, (c, y) in tests.items()}


def rotation_training(regime, args):
    """`fit(model, train, budget)` for `comparison.compare`: an epoch at a
    time on the voxelised digits, rotated anew at each epoch in the
    rotated regime (the same rotations for every model)."""

    def fit(model, train, budget):
        rng = np.random.default_rng(args.seed)
        batches = dict(batch_size=budget.batch_size, steps_per_epoch=budget.steps_per_epoch)
        for _ in range(budget.epochs):
            clouds = train.x if regime == "aligned" else geometry.randomly_rotated(train.x, rng)
            model.fit(geometry.voxelize(clouds, args.size), train.y, epochs=1, verbose=0, **batches)

    return fit


def main(argv=None):
    parser = comparison.argument_parser(__doc__, epochs=5, batch_size=16)
    parser.add_argument("--folder", help="a folder of .npy volumes per class")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument(
        "--size",
        type=int,
        help="the volumes' side (generated: 24; MNIST: 20, where both models "
        "have about 415,000 parameters)",
    )
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--train", type=int, help="training volumes (generated: 2000)")
    parser.add_argument("--test", type=int, help="test volumes (generated: 500)")
    parser.add_argument("--mnist", action="store_true", help="MNIST digits: the rotation study")
    parser.add_argument("--data-dir", default=None, help="TFDS data dir (with --mnist)")
    parser.add_argument("--points", type=int, default=2048, help="points per digit (--mnist)")
    parser.add_argument("--thickness", type=float, default=0.15, help="digits' half depth")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--regimes", nargs="+", choices=REGIMES, default=list(REGIMES))
    parser.add_argument("--angles", nargs="+", type=float, default=[0, 30, 60, 90, 120, 150, 180])
    parser.add_argument("--curve-test", type=int, default=1000, help="test digits per angle")
    comparison.add_resume_argument(parser)
    args = comparison.parse_args(parser, argv)
    if not 0 < args.test_fraction < 1:
        parser.error(f"--test-fraction must be in (0, 1). Received: {args.test_fraction}")
    if args.mnist:
        return mnist_rotation_study(args)
    args.train, args.test, args.size = args.train or 2000, args.test or 500, args.size or 24
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
        resume=args.resume,
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


def mnist_rotation_study(args):
    """`--mnist`: every model trained in every regime, tested aligned,
    rotated and at the fixed angles; writes the angle figure."""
    args.train, args.test, args.size = args.train or 60000, args.test or 10000, args.size or 20
    clouds, labels, test_clouds, test_labels = mnist_digits(args)
    shape, classes = (args.size,) * 3 + (1,), 10
    builders = {"capsules": capsule_model, "cnn": cnn_model}
    output_dir = comparison.output_dir(args, "volume_capsules")
    results = comparison.compare(
        {
            f"{name}_trained_{regime}": comparison.Model(
                lambda name=name: builders[name](shape, classes),
                fit=rotation_training(regime, args),
            )
            for regime in args.regimes
            for name in args.models
        },
        train=comparison.Data(clouds, labels),
        test=rotation_tests(test_clouds, test_labels, args),
        budget=comparison.Budget.from_args(args),
        output_dir=output_dir,
        seed=args.seed,
        resume=args.resume,
        results={
            "backend": keras.backend.backend(),
            "data": "mnist",
            "shape": list(shape),
            "points": args.points,
            "thickness": args.thickness,
            "train": len(clouds),
            "test": len(test_clouds),
            "curve_test": min(args.curve_test, len(test_clouds)),
            "angles": args.angles,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "seed": args.seed,
        },
    )
    import figures  # matplotlib, for this figure only

    figures.plot_accuracy_by_angle(
        results, args.angles, os.path.join(output_dir, "accuracy_by_angle.png")
    )
    return results


if __name__ == "__main__":
    main()
