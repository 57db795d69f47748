"""
Title: MNIST as sequences: capsules against an LSTM and a Transformer
Description: Digits read row by row, pixel by pixel or in a fixed random pixel order; capsule models and same-size sequence baselines.
Reference: Heinsen, "An Algorithm for Routing Vectors in Sequences", arXiv:2211.11754, 2022.

Each digit becomes a sequence (`--form`, `data.digit_sequences`):

- `rows`: 28 steps of 28 pixels;
- `pixels`: 784 steps of one pixel, row by row ("sequential MNIST");
- `permuted`: the same 784 pixels in one fixed random order, the same for
  every run ("permuted MNIST", Le et al., 2015).

Five models train in the same run, at the same budget (epochs, batch size,
Adam at `--learning-rate` with the gradient's norm clipped at 1):

- `capsules`: `Conv1D(32, k, strides=s, relu) -> PrimaryCapsule1D(4, 8, k2,
  strides=s2) -> Capsule(10, 16)` (dynamic routing) `-> Length`,
  `MarginLoss` (`k, s, k2, s2` = 3, 1, 3, 2 on rows; 8, 4, 16, 16 on
  pixels: 48 primary capsules either way);
- `vector_routing`: each step embedded (`Dense` + a learned position
  embedding) and every step routed (`CapsuleSequenceClassifier` on that
  embedding, `hidden_states="last"`): Heinsen's routing over all 784
  pixels, in memory linear in the length;
- `transformer_capsules`: a small Transformer built here (the same
  embedding, then `--layers` keras-hub `TransformerEncoder`s of width
  `--width`) with `CapsuleSequenceClassifier` routing the outputs of
  every layer;
- `transformer`, its baseline: the same Transformer, from the same initial
  weights, with a pooled head (mean over steps -> Dense);
- `lstm`: `LSTM(--lstm-units) -> Dense`, the recurrent baseline.

The models with a keras-hub Transformer or position embedding need
`keras-hub`.

    KERAS_BACKEND=jax python examples/sequence_mnist.py --form rows --epochs 5
    python examples/sequence_mnist.py --form permuted --train 10000 --models capsules lstm
    python examples/sequence_mnist.py --smoke   # fake data: a check, in seconds

Writes metrics.json (test accuracy, parameters, training and test samples
per second of each model) to --output-dir (default
runs/sequence_mnist/<backend>), after each model; `--resume` goes on from
the models a stopped run finished.
"""

import comparison
import data
import keras

import keras_capsules as kc

MODELS = ("capsules", "vector_routing", "transformer_capsules", "transformer", "lstm")
NUM_CLASSES = 10
# (kernel size, strides) of the capsules' convolution and primary capsules:
# 48 primary capsules (12 positions of 4 types) in both forms, each seeing
# 5 rows, or 68 pixels (2.4 rows); the strides leave out the last row, or
# its last 12 pixels: blank on MNIST's border.
CONVOLUTIONS = {
    "rows": ((3, 1), (3, 2)),
    "pixels": ((8, 4), (16, 16)),
    "permuted": ((8, 4), (16, 16)),
}


def embedding(inputs, width):
    """Each step projected to `width` plus a learned embedding of its
    position."""
    import keras_hub

    x = keras.layers.Dense(width, name="step_embedding")(inputs)
    positions = keras_hub.layers.PositionEmbedding(inputs.shape[1], name="position_embedding")(x)
    return keras.layers.Add(name="embedded")([x, positions])


def transformer(inputs, args):
    """The embedding and `--layers` Transformer encoders; returns the
    backbone (its output: the last layer's) and the layers' names."""
    import keras_hub

    x = embedding(inputs, args.width)
    names = []
    for i in range(args.layers):
        names.append(f"encoder_{i}")
        x = keras_hub.layers.TransformerEncoder(
            intermediate_dim=2 * args.width, num_heads=2, name=names[-1]
        )(x)
    return keras.Model(inputs, x, name="transformer_backbone"), names


def capsule_head(backbone, hidden_states):
    return kc.models.CapsuleSequenceClassifier(
        backbone,
        NUM_CLASSES,
        hidden_states=hidden_states,
        hidden_dim=64,
        num_parts=16,
        part_dim=32,
        capsule_dim=16,
    )


def build(name, args, shape):
    """An uncompiled model and its loss."""
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    inputs = keras.Input(shape)
    if name == "capsules":
        (kernel, strides), (primary_kernel, primary_strides) = CONVOLUTIONS[args.form]
        x = keras.layers.Conv1D(32, kernel, strides=strides, activation="relu")(inputs)
        x = kc.PrimaryCapsule1D(4, 8, primary_kernel, strides=primary_strides)(x)
        scores = kc.Length()(kc.Capsule(NUM_CLASSES, 16)(x))
        return keras.Model(inputs, scores, name=name), kc.MarginLoss()
    if name == "vector_routing":
        backbone = keras.Model(inputs, embedding(inputs, args.width), name="step_embedding")
        return capsule_head(backbone, "last"), cross_entropy
    if name.startswith("transformer"):
        backbone, names = transformer(inputs, args)
        if name == "transformer_capsules":
            return capsule_head(backbone, names), cross_entropy
        pooled = keras.layers.GlobalAveragePooling1D()(backbone.output)
        logits = keras.layers.Dense(NUM_CLASSES)(pooled)
        return keras.Model(inputs, logits, name=name), cross_entropy
    x = keras.layers.LSTM(args.lstm_units)(inputs)
    return keras.Model(inputs, keras.layers.Dense(NUM_CLASSES)(x), name=name), cross_entropy


def main(argv=None):
    parser = comparison.argument_parser(__doc__, epochs=5, batch_size=64)
    parser.add_argument("--form", choices=data.SEQUENCE_FORMS, default="rows")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--train", type=int, default=0, help="training digits (0: all 60,000)")
    parser.add_argument("--test", type=int, default=0, help="test digits (0: all 10,000)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--width", type=int, default=32, help="embedding and Transformer width")
    parser.add_argument("--layers", type=int, default=2, help="Transformer layers")
    parser.add_argument("--lstm-units", type=int, default=64)
    parser.add_argument("--data-dir", default=None, help="TFDS data dir (default: $TFDS_DATA_DIR)")
    comparison.add_resume_argument(parser)
    comparison.add_smoke_argument(parser, train=24, test=8, batch_size=8)
    args = comparison.parse_args(parser, argv, positive=("width", "layers", "lstm_units"))
    split = {"train": f"train[:{args.train}]" if args.train else "train"}
    split["test"] = f"test[:{args.test}]" if args.test else "test"
    with comparison.smoke_data(args):
        x, y = data.mnist_sequences(split["train"], args.form, args.data_dir)
        test_x, test_y = data.mnist_sequences(split["test"], args.form, args.data_dir)

    def build_and_compile(name):
        model, loss = build(name, args, x.shape[1:])
        model.compile(
            optimizer=keras.optimizers.Adam(args.learning_rate, clipnorm=1.0),
            loss=loss,
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        )
        return model

    return comparison.compare(
        {name: (lambda name=name: build_and_compile(name)) for name in args.models},
        train=comparison.Data(x, y),
        test=comparison.Data(test_x, test_y),
        budget=comparison.Budget.from_args(args),
        output_dir=comparison.output_dir(args, "sequence_mnist"),
        seed=args.seed,  # both Transformers: the same initial weights
        resume=args.resume,
        results={
            "backend": keras.backend.backend(),
            "data": "mnist",
            "form": args.form,
            "steps": int(x.shape[1]),
            "train": len(x),
            "test": len(test_x),
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "width": args.width,
            "layers": args.layers,
            "lstm_units": args.lstm_units,
            "seed": args.seed,
        },
    )


if __name__ == "__main__":
    main()
