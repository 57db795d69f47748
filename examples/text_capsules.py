"""
Title: Text classification: capsule heads against pooled heads
Description: IMDB or SST-2; a BERT backbone with its usual pooled head and with capsules, and Embedding models.
Reference: Heinsen, "An Algorithm for Routing Vectors in Sequences", arXiv:2211.11754, 2022.

Four models train in the same run, at the same budget (epochs, batch size,
sequence length, Adam at one learning rate), on TFDS `imdb_reviews`
(`--dataset glue/sst2`: SST-2, held out on its validation split, the test
split has no labels):

- `bert_pooled`: a BERT backbone with keras-hub's usual head
  (`keras_hub.models.BertTextClassifier`: the pooled first token -> Dense);
- `bert_capsules`: the same backbone, from the same initial weights, with
  `keras_capsules.models.CapsuleSequenceClassifier` (the hidden states of
  every depth routed to class capsules, the padding mask honoured);
- `capsules`, no backbone: `Embedding -> PrimaryCapsule1D(8, 8, 5,
  strides=2) -> Capsule(classes, 16)` (dynamic routing) `-> Length`,
  `MarginLoss`;
- `conv1d`, its baseline: `Embedding -> Conv1D(64, 5, relu) -> global max
  pooling -> Dense`, cross-entropy.

Without `--preset` the BERT backbone is small (`--bert-layers`, hidden size
`--bert-dim`), built from its config and trained from scratch on word ids
from a vocabulary of the training texts (`keras.layers.TextVectorization`,
`--vocabulary`), so the script needs no download beyond the dataset. With
`--preset` (a keras-hub BERT preset such as `bert_tiny_en_uncased`,
downloaded by keras-hub) both BERT models start from the pretrained
backbone and the preset's tokenizer; `--freeze-backbone` trains their
heads only. The Embedding models always use the word vocabulary.

    KERAS_BACKEND=jax python examples/text_capsules.py --epochs 2
    python examples/text_capsules.py --preset bert_tiny_en_uncased --freeze-backbone
    python examples/text_capsules.py --smoke   # fake data: a check, in seconds

TFDS downloads the dataset on the first run. Without internet access,
bring its original file (`aclImdb_v1.tar.gz`; SST-2: `SST-2.zip`) from a
machine that has it and build the dataset from it:

    python examples/prepare_tfds_offline.py imdb_reviews DIR aclImdb_v1.tar.gz
    TFDS_DATA_DIR=DIR python examples/text_capsules.py

(`--smoke` runs the script on random examples, no data needed.)

Writes metrics.json (held-out accuracy, parameters, training seconds per
model) to --output-dir (default runs/text_capsules/<backend>).
"""

import comparison
import data
import keras
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

import keras_capsules as kc

DATASETS = {  # text feature, held-out split
    "imdb_reviews": ("text", "test"),
    "glue/sst2": ("sentence", "validation"),
}
MODELS = ("bert_pooled", "bert_capsules", "capsules", "conv1d")


def texts_and_labels(name, split, count, data_dir=None):
    """The first `count` texts (str) and labels of a TFDS split."""
    feature, _ = DATASETS[name]
    ds = data.load_split(name, split, data_dir=data_dir)
    if count:
        ds = ds.take(count)
    texts, labels = [], []
    for example in tfds.as_numpy(ds):
        texts.append(example[feature].decode("utf-8"))
        labels.append(int(example["label"]))
    return np.array(texts, dtype=object), np.array(labels, "int32")


class WordIds:
    """Word ids of texts: 0 pads, 1 is an unknown word, `cls` starts each
    sequence (BERT's pooled head reads the first token)."""

    def __init__(self, texts, vocabulary, length):
        self.vectorize = keras.layers.TextVectorization(
            max_tokens=vocabulary, output_sequence_length=length - 1
        )
        self.vectorize.adapt(texts)
        self.cls = self.vectorize.vocabulary_size()
        self.size = self.cls + 1

    def __call__(self, texts):
        ids = keras.ops.convert_to_numpy(self.vectorize(texts)).astype("int32")
        return np.concatenate([np.full((len(ids), 1), self.cls, "int32"), ids], axis=1)


def bert_inputs(ids):
    return {
        "token_ids": ids,
        "segment_ids": np.zeros_like(ids),
        "padding_mask": (ids != 0).astype("int32"),
    }


def bert_backbone(args, vocabulary_size):
    import keras_hub

    if args.preset:
        return keras_hub.models.Backbone.from_preset(args.preset)
    return keras_hub.models.BertBackbone(
        vocabulary_size=vocabulary_size,
        num_layers=args.bert_layers,
        num_heads=max(1, args.bert_dim // 32),
        hidden_dim=args.bert_dim,
        intermediate_dim=4 * args.bert_dim,
        max_sequence_length=args.sequence_length,
    )


def build(name, args, num_classes, vocabulary_size):
    """An uncompiled model and its loss."""
    import keras_hub

    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if name.startswith("bert"):
        backbone = bert_backbone(args, vocabulary_size)
        backbone.trainable = not args.freeze_backbone
        if name == "bert_pooled":
            model = keras_hub.models.BertTextClassifier(backbone, num_classes, preprocessor=None)
        else:
            model = kc.models.CapsuleSequenceClassifier(backbone, num_classes)
        return model, cross_entropy
    tokens = keras.Input((args.sequence_length,), dtype="int32")
    x = keras.layers.Embedding(vocabulary_size, 64)(tokens)
    if name == "capsules":
        x = kc.PrimaryCapsule1D(8, 8, 5, strides=2)(x)
        scores = kc.Length()(kc.Capsule(num_classes, 16)(x))
        return keras.Model(tokens, scores, name=name), kc.MarginLoss()
    x = keras.layers.Conv1D(64, 5, activation="relu")(x)
    logits = keras.layers.Dense(num_classes)(keras.layers.GlobalMaxPooling1D()(x))
    return keras.Model(tokens, logits, name=name), cross_entropy


def encode(kind, args, words, *splits):
    """The inputs of each split's texts for the models of `kind`: `"bert"`,
    the preset's tokens with `--preset` (else the word ids as BERT's
    inputs); `"words"`, word ids."""
    if kind == "bert" and args.preset:
        import keras_hub

        preprocessor = keras_hub.models.TextClassifierPreprocessor.from_preset(
            args.preset, sequence_length=args.sequence_length
        )
        return tuple(
            {key: keras.ops.convert_to_numpy(v) for key, v in preprocessor(list(texts)).items()}
            for texts in splits
        )
    ids = [words(texts) for texts in splits]
    return tuple(bert_inputs(i) for i in ids) if kind == "bert" else tuple(ids)


def main(argv=None):
    parser = comparison.argument_parser(__doc__, epochs=2, batch_size=32)
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="imdb_reviews")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--sequence-length", type=int, default=256)
    parser.add_argument("--train", type=int, default=0, help="training texts (0: all)")
    parser.add_argument("--test", type=int, default=0, help="held-out texts (0: all)")
    parser.add_argument("--vocabulary", type=int, default=20000, help="words kept")
    comparison.add_pretrained_arguments(parser, "keras-hub BERT preset of the BERT models")
    parser.add_argument("--bert-layers", type=int, default=2)
    parser.add_argument("--bert-dim", type=int, default=128)
    parser.add_argument("--data-dir", help="TFDS data dir (default: $TFDS_DATA_DIR)")
    comparison.add_smoke_argument(
        parser,
        train=comparison.SMOKE_EXAMPLES,
        test=8,
        sequence_length=16,
        vocabulary=100,
        bert_layers=1,
        bert_dim=16,
        batch_size=8,
    )
    args = comparison.parse_args(parser, argv)
    if args.sequence_length < 8:
        parser.error(f"--sequence-length must be >= 8. Received: {args.sequence_length}")
    learning_rate = comparison.learning_rate(args)

    _, held_out = DATASETS[args.dataset]
    with comparison.smoke_data(args):
        texts, labels = texts_and_labels(args.dataset, "train", args.train, args.data_dir)
        test_texts, test_labels = texts_and_labels(args.dataset, held_out, args.test, args.data_dir)
    num_classes = 2
    words = WordIds(texts, args.vocabulary, args.sequence_length)
    inputs = {}  # once per kind: both BERT models read the same tokens

    def encoded(name):
        kind = "bert" if name.startswith("bert") else "words"
        if kind not in inputs:
            inputs[kind] = encode(kind, args, words, texts, test_texts)
        return inputs[kind]

    def model(name):
        def train():
            # One shuffled pipeline for every model (keras-hub's classifier
            # would make its own, unshuffled, from arrays).
            batches = (
                tf.data.Dataset.from_tensor_slices((encoded(name)[0], labels))
                .shuffle(len(labels), seed=args.seed)
                .batch(args.batch_size)
            )
            return comparison.Data(batches, count=len(labels))

        def build_and_compile():
            model, loss = build(name, args, num_classes, words.size)
            model.compile(
                optimizer=keras.optimizers.Adam(learning_rate),
                loss=loss,
                metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            )
            return model

        return comparison.Model(
            build_and_compile,
            train=train,
            test=lambda: comparison.Data(encoded(name)[1], test_labels),
        )

    return comparison.compare(
        {name: model(name) for name in args.models},
        train=None,
        test=None,
        budget=comparison.Budget.from_args(args),
        output_dir=comparison.output_dir(args, "text_capsules"),
        seed=args.seed,  # BERT models: the same backbone weights
        results={
            "backend": keras.backend.backend(),
            "dataset": args.dataset,
            "train": len(texts),
            "test": len(test_texts),
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "sequence_length": args.sequence_length,
            "learning_rate": learning_rate,
            "backbone": args.preset or f"BertBackbone({args.bert_layers} layers, {args.bert_dim})",
            "frozen_backbone": args.freeze_backbone,
            "seed": args.seed,
        },
    )


if __name__ == "__main__":
    main()
