"""
Title: Point-cloud classification: capsules, a linear probe and PointNet, aligned and rotated
Description: ModelNet40 (HDF5 release) or generated shapes; trained on aligned or randomly rotated clouds.
Reference: Zhao, Birdal, Deng & Tombari, "3D Point Capsule Networks", CVPR 2019.

The models train in the same run at the same budget (epochs, batch size,
Adam), each twice: on aligned clouds, and with a new random rotation
(uniform over SO(3)) of every training cloud at every epoch. Each is tested
on the aligned test clouds and on the same clouds randomly rotated:

- `capsules`: `models.PointCapsuleClassifier` with class capsules routed
  from a `PointCapsNet` encoder's latent capsules, margin loss, end to end;
- `linear_probe`: the paper's transfer protocol: the `PointCapsNet`
  autoencoder trained on the training clouds without labels (Chamfer
  distance, the same epochs), frozen, and a linear classifier on its
  latent capsules;
- `pointnet`: a PointNet-style classifier of about the capsule classifier's
  size: per point `Dense(64) -> Dense(128) -> Dense(--pointnet-width)`
  (batch norm, ReLU), max over the points, `Dense(256) -> Dense(classes)`;
- `quaternion`: `models.QuaternionCapsuleClassifier` (Zhao et al., ECCV
  2020), capsules whose poses are rotations, built on local reference
  frames: rotation-invariant by construction.
- `set_capsules`: the set recipe of docs/examples.md with a per-point map
  before it: per point `Dense(64) -> Dense(64)` (ReLU), `SetPrimaryCapsule(8,
  8)` (8 capsules of 8 per point), class capsules of 16 routed from every
  point's capsules with shared transforms (`Capsule(share_weights=True)`,
  dynamic routing), margin loss on their lengths.

The point capsule network is not rotation invariant, nor is PointNet: the
rotated columns say how far each falls, and how much augmentation buys;
the quaternion capsules should score the same both ways.

Data: `--mnist`, MNIST digits as point sets, the protocol of PointNet++
(Qi et al., NeurIPS 2017, Table 1: 512 points per digit; PointNet 0.78 %
error, PointNet++ 0.51 %): `--points` of each digit's foreground pixels
(intensity >= 128) drawn with replacement, each at a random spot inside
its pixel, as `(x, y, 0)` in `[-1, 1]` (`data.digit_point_clouds`), from
TFDS `mnist` (`--data-dir`); the rotated test set turns these flat digits
in 3-D. `--modelnet40 DIR`, the `modelnet40_ply_hdf5_2048` release
(`ply_data_train*.h5`, `ply_data_test*.h5`: `data` (N, 2048, 3), `label`
(N, 1)), `--points` of each cloud's points drawn once; without it,
generated surfaces of four shapes (sphere, cube, cylinder, cone) in their
canonical pose, scaled at random, `--train` and `--test` of them.

    KERAS_BACKEND=jax python examples/pointcloud_capsules.py
    KERAS_BACKEND=jax python examples/pointcloud_capsules.py --mnist --points 512 --models pointnet
    python examples/pointcloud_capsules.py --modelnet40 modelnet40_ply_hdf5_2048 --epochs 20

Writes metrics.json (accuracy aligned, rotated and, for the first
`--curve-test` test clouds, at the fixed angles `--angles` about `z` (in a
digit's plane) and about `x` (out of it); parameters, seconds per model
and training regime) and accuracy_by_angle.png to --output-dir (default
runs/pointcloud_capsules/<backend>); metrics.json after each model too, and
`--resume` goes on from the models a stopped run finished.
"""

import contextlib
import os
import warnings

import comparison
import data
import geometry
import keras
import numpy as np

import keras_capsules as kc

SHAPES = ("sphere", "cube", "cylinder", "cone")
MODELS = ("capsules", "linear_probe", "pointnet", "quaternion", "set_capsules")
REGIMES = ("aligned", "rotated")


def generated_shapes(count, points, seed):
    """`count` clouds of `points` points on the surface of a sphere, cube,
    cylinder or cone (labels 0-3), axis-aligned, scaled by 0.6-1.0."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(SHAPES), count).astype("int32")
    clouds = np.empty((count, points, 3), "float32")
    for n, label in enumerate(labels):
        if label == 0:
            p = rng.normal(size=(points, 3))
            p /= np.linalg.norm(p, axis=1, keepdims=True)
        elif label == 1:
            p = rng.uniform(-1, 1, (points, 3))
            face = rng.integers(0, 3, points)
            p[np.arange(points), face] = rng.choice([-1.0, 1.0], points)
        else:
            angle = rng.uniform(0, 2 * np.pi, points)
            height = rng.uniform(-1, 1, points)
            radius = 1.0 if label == 2 else (1.0 - height) / 2  # cone: apex at z = 1
            p = np.stack([radius * np.cos(angle), radius * np.sin(angle), height], -1)
        clouds[n] = rng.uniform(0.6, 1.0) * p
    return clouds, labels


def load(args):
    """Training and test clouds and labels, and the number of classes."""
    if args.mnist:
        splits = []
        for split, count, seed in (
            ("train", args.train, args.seed),
            ("test", args.test, args.seed + 1),
        ):
            split = split if count is None else f"{split}[:{count}]"
            splits += data.mnist_point_clouds(split, args.points, seed, data_dir=args.data_dir)
        return (*splits, 10)
    if args.modelnet40:
        rng = np.random.default_rng(args.seed)
        splits = []
        for split in ("train", "test"):
            points, labels = data.modelnet40_hdf5(args.modelnet40, split)
            if args.points > points.shape[1]:
                raise ValueError(
                    f"--points must be at most the clouds' {points.shape[1]} points. "
                    f"Received: --points {args.points}"
                )
            keep = rng.permutation(points.shape[1])[: args.points]
            splits += [points[:, keep], labels]
        return (*splits, data.MODELNET40_CLASSES)
    train = generated_shapes(args.train or 2000, args.points, args.seed)
    test = generated_shapes(args.test or 1000, args.points, args.seed + 1)
    return (*train, *test, len(SHAPES))


def point_capsnet(args):
    return kc.models.PointCapsNet(
        num_points=args.points,
        primary_capsules=args.primary_capsules,
        primary_dim=8,
        latent_capsules=16,
        latent_dim=16,
    )


def pointnet(args, num_classes):
    layers = [keras.Input((None, 3))]
    for width in (64, 128, args.pointnet_width):
        layers += [
            keras.layers.Dense(width),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
        ]
    layers += [
        keras.layers.GlobalMaxPooling1D(),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(num_classes),
    ]
    model = keras.Sequential(layers, name="pointnet")
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model


def set_capsules(num_classes):
    points = keras.Input((None, 3))
    x = keras.layers.Dense(64, activation="relu")(points)
    x = keras.layers.Dense(64, activation="relu")(x)
    capsules = kc.layers.SetPrimaryCapsule(8, 8)(x)
    classes = kc.Capsule(num_classes, 16, share_weights=True)(capsules)
    model = keras.Model(points, kc.Length()(classes), name="set_capsules")
    model.compile(optimizer="adam", loss=kc.MarginLoss(), metrics=["accuracy"])
    return model


def training_clouds(clouds, regime, rng):
    return geometry.randomly_rotated(clouds, rng) if regime == "rotated" else clouds


def build(name, args, num_classes):
    """The compiled model of `name`; for `linear_probe`, the autoencoder it
    starts from (`fit` trains it, then the probe)."""
    if name == "quaternion":
        model = kc.models.QuaternionCapsuleClassifier(
            num_classes, num_patches=min(64, args.points), patch_size=min(16, args.points)
        )
    elif name == "pointnet":
        return pointnet(args, num_classes)
    elif name == "set_capsules":
        return set_capsules(num_classes)
    elif name == "linear_probe":
        model = point_capsnet(args)
    else:
        model = kc.models.PointCapsuleClassifier(point_capsnet(args), num_classes, head="capsules")
    model.compile()
    return model


def train(name, regime, args, num_classes):
    """`fit(model, train, budget)` for `comparison.compare`: an epoch at a
    time, the clouds rotated anew for each in the rotated regime; returns
    the model to evaluate."""

    def fit(model, data, budget):
        rng = np.random.default_rng(args.seed)  # the same rotations for every model
        clouds, labels = data.x, data.y
        batches = dict(batch_size=budget.batch_size, steps_per_epoch=budget.steps_per_epoch)
        if name == "linear_probe":
            autoencoder = model
            for _ in range(budget.epochs):
                x = training_clouds(clouds, regime, rng)
                autoencoder.fit(x, x, epochs=1, verbose=0, **batches)
            autoencoder.trainable = False
            rng = np.random.default_rng(args.seed)
            model = kc.models.PointCapsuleClassifier(autoencoder, num_classes, head="linear")
            model.compile()
        with decoder_without_gradients():
            for _ in range(budget.epochs):
                x = training_clouds(clouds, regime, rng)
                model.fit(x, labels, epochs=1, verbose=0, **batches)
        return model

    return fit


# Keras's warning when only a PointCapsNet's decoder gets no gradients
# (the variables listed are all under .../decoder/).
DECODER_WITHOUT_GRADIENTS = (
    r"Gradients do not exist for variables \[('[^']*/decoder/[^']*'(, )?)+\] when minimizing"
)


@contextlib.contextmanager
def decoder_without_gradients():
    """Silences the warning that the classifier's decoder gets no gradients:
    classification trained end to end does not use the decoder, as
    expected. A warning that names any other variable still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", DECODER_WITHOUT_GRADIENTS, UserWarning)
        yield


def classifying_parameters(model):
    """The parameters a model classifies with: a point capsule classifier's
    decoder does not classify."""
    decoder = getattr(getattr(model, "autoencoder", None), "decoder", None)
    return model.count_params() - (decoder.count_params() if decoder is not None else 0)


def main(argv=None):
    parser = comparison.argument_parser(__doc__, epochs=10, batch_size=32)
    parser.add_argument("--modelnet40", metavar="DIR", help="the ModelNet40 HDF5 release")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--regimes", nargs="+", choices=REGIMES, default=list(REGIMES))
    parser.add_argument("--points", type=int, default=256, help="points per cloud")
    parser.add_argument(
        "--mnist",
        action="store_true",
        help="MNIST digits as point sets (TFDS mnist): --points of their foreground pixels",
    )
    parser.add_argument("--data-dir", default=None, help="TFDS data dir (with --mnist)")
    parser.add_argument(
        "--train", type=int, help="training clouds (generated: 2000; MNIST: the first N)"
    )
    parser.add_argument(
        "--test", type=int, help="test clouds (generated: 1000; MNIST: the first N)"
    )
    parser.add_argument("--angles", nargs="+", type=float, default=[0, 30, 60, 90, 120, 150, 180])
    parser.add_argument("--curve-test", type=int, default=1000, help="test clouds per angle")
    parser.add_argument("--primary-capsules", type=int, default=256)
    parser.add_argument("--pointnet-width", type=int, default=2048)
    comparison.add_resume_argument(parser)
    args = comparison.parse_args(parser, argv)
    if args.points % 16:
        parser.error(f"--points must be a multiple of 16. Received: --points {args.points}")
    clouds, labels, test_clouds, test_labels, num_classes = load(args)
    output_dir = comparison.output_dir(args, "pointcloud_capsules")
    tests = geometry.rotation_test_sets(
        test_clouds, test_labels, np.random.default_rng(args.seed + 2), args.angles, args.curve_test
    )
    tests = {name: comparison.Data(c, y) for name, (c, y) in tests.items()}
    models = {
        f"{name}_trained_{regime}": comparison.Model(
            lambda name=name: build(name, args, num_classes),
            fit=train(name, regime, args, num_classes),
            parameters=classifying_parameters,
        )
        for regime in args.regimes
        for name in args.models
    }
    results = comparison.compare(
        models,
        train=comparison.Data(clouds, labels),
        test=tests,
        budget=comparison.Budget.from_args(args),
        output_dir=output_dir,
        seed=args.seed,
        resume=args.resume,
        results={
            "backend": keras.backend.backend(),
            "data": "mnist"
            if args.mnist
            else "modelnet40"
            if args.modelnet40
            else "generated shapes",
            "train": len(clouds),
            "test": len(test_clouds),
            "points": args.points,
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
