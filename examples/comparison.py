"""The comparison examples' shared command line and loop.

A comparison script trains several models in one run, at one budget
(epochs, batch size, optionally steps per epoch), from one seed, on the
same data, and reports each: `compare(...)` builds every model (the seed
set before each, so models that share a backbone start from the same
weights), trains it with `fit`, times the training and the evaluation,
evaluates it on every test set, prints one table (a row as each model
finishes) and writes `metrics.json` atomically (`atomic.write_json`).

Every model's row holds `parameters`, `trainable_parameters`, its scores
(`accuracy` by default, `<test>_accuracy` with several named test sets),
`train_seconds`, `train_samples_per_second` and
`test_samples_per_second`. The rates are over the whole `fit` and
`evaluate` calls, compilation included: they compare models of one run,
not the library's speed (see `benchmarks/` for that).

`argument_parser(...)` gives the flags every comparison script has:
`--epochs`, `--batch-size`, `--steps-per-epoch`, `--seed` and
`--output-dir` (default `runs/<example>/<backend>`).
"""

import argparse
import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Callable
from typing import Any

import atomic
import keras
import numpy as np

# ---------------------------------------------------------- command line


def argument_parser(doc, epochs, batch_size):
    """A comparison script's parser: described by the first line of `doc`
    (its module docstring), with the budget flags (`--epochs`,
    `--batch-size`, `--steps-per-epoch`), `--seed` and `--output-dir`."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="limit the training steps of each epoch (default: the whole training set)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output-dir", help="where metrics.json goes (default: runs/<example>/<backend>)"
    )
    return parser


def add_resume_argument(parser):
    """`--resume`: a run stopped part way (killed, out of time) goes on
    from the models it had finished (`compare(..., resume=True)`)."""
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows of the models this run (the same data, budget and seed) already "
        "finished in --output-dir's metrics.json, and train only the others",
    )


def add_pretrained_arguments(parser, preset_help):
    """`--preset`, `--freeze-backbone` and `--learning-rate`: the flags of the
    scripts whose models share a keras-hub backbone; `learning_rate(args)`
    resolves the last."""
    parser.add_argument("--preset", help=preset_help)
    parser.add_argument("--freeze-backbone", action="store_true")
    parser.add_argument(
        "--learning-rate",
        type=float,
        help="Adam's, for every model (default: 5e-5 fine-tuning a preset, else 1e-3)",
    )


def learning_rate(args):
    """`--learning-rate`, or 5e-5 to fine-tune a preset's backbone, else 1e-3."""
    if args.learning_rate:
        return args.learning_rate
    return 5e-5 if args.preset and not args.freeze_backbone else 1e-3


def add_smoke_argument(parser, **sizes):
    """`--smoke`: one epoch at the sizes `sizes` (flag name with `_` ->
    value, e.g. `train=16`) on fake TFDS data (`data.mock_data`, opened by
    `smoke_data(args)`): the script's code end to end, offline, in seconds,
    learning nothing."""
    listed = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in sizes.items())
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"1 epoch on {SMOKE_EXAMPLES} fake TFDS examples per split, with {listed} "
        "(no download; for tests)",
    )
    parser.set_defaults(smoke_sizes=dict(sizes, epochs=1))


# Fake examples in each split of a --smoke run.
SMOKE_EXAMPLES = 24


def smoke_data(args):
    """`data.mock_data` with `--smoke`, else a context that changes nothing."""
    if not getattr(args, "smoke", False):
        return contextlib.nullcontext()
    import data  # TensorFlow and TFDS: only the scripts that read TFDS import it

    return data.mock_data(SMOKE_EXAMPLES)


def parse_args(parser, argv, positive=()):
    """`parser.parse_args(argv)`, with the budget flags and the script's own
    `positive` ones (names as attributes, `"lstm_units"`) checked `>= 1`."""
    args = parser.parse_args(argv)
    if getattr(args, "smoke", False):
        for flag, value in args.smoke_sizes.items():
            setattr(args, flag, value)
    for flag in ("epochs", "batch_size", "steps_per_epoch", *positive):
        value = getattr(args, flag)
        if value is not None and value < 1:
            name = "--" + flag.replace("_", "-")
            parser.error(f"{name} must be >= 1. Received: {name} {value}")
    return args


def output_dir(args, example):
    """`--output-dir`, else `runs/<example>/<backend>`: runs of one script on
    several backends side by side."""
    return args.output_dir or os.path.join("runs", example, keras.backend.backend())


# ------------------------------------------------------------------ data


@dataclasses.dataclass(frozen=True)
class Budget:
    """What every model of a comparison trains for."""

    epochs: int
    batch_size: int
    steps_per_epoch: int | None = None

    @classmethod
    def from_args(cls, args):
        return cls(args.epochs, args.batch_size, getattr(args, "steps_per_epoch", None))

    def samples(self, count):
        """The samples seen in training on a set of `count`."""
        if self.steps_per_epoch:
            count = min(count, self.steps_per_epoch * self.batch_size)
        return count * self.epochs


@dataclasses.dataclass(frozen=True)
class Data:
    """A training or test set: arrays (`x` may be a dict of arrays) and
    labels, or a `tf.data.Dataset` of `(x, y)` batches as `x` (then `count`,
    its number of samples, is required)."""

    x: Any
    y: Any = None
    count: int | None = None

    def __len__(self):
        if self.count is not None:
            return self.count
        x = next(iter(self.x.values())) if isinstance(self.x, dict) else self.x
        return len(x)

    @property
    def batched(self):
        """Whether `x` is a dataset of batches."""
        return self.y is None and not isinstance(self.x, (np.ndarray, dict))


def fit(model, train, budget):
    """The default training: `model.fit` for the budget, quiet; a dataset of
    batches is repeated when `steps_per_epoch` may outrun it, and not
    shuffled again (it is shuffled as it is made)."""
    if train.batched:
        x = train.x.repeat() if budget.steps_per_epoch else train.x
        model.fit(
            x,
            epochs=budget.epochs,
            steps_per_epoch=budget.steps_per_epoch,
            shuffle=False,
            verbose=0,
        )
    else:
        model.fit(
            train.x,
            train.y,
            batch_size=budget.batch_size,
            epochs=budget.epochs,
            steps_per_epoch=budget.steps_per_epoch,
            verbose=0,
        )


def accuracy(model, test, batch_size=64):
    """The default score: `{"accuracy": the first compiled metric}`."""
    if test.batched:
        values = model.evaluate(test.x, verbose=0)
    else:
        values = model.evaluate(test.x, test.y, batch_size=batch_size, verbose=0)
    return {"accuracy": float(values[1])}


# ------------------------------------------------------------------ loop


@dataclasses.dataclass
class Model:
    """One model of a comparison.

    `build()` -> a compiled `keras.Model` (called right after
    `keras.utils.set_random_seed(seed)`). `train`, `test`: its data, when
    it reads other inputs than the comparison's, or functions that make
    them, called after `build` (a dataset shuffled with a seed is made
    after the global seed is set, so every model sees the same order). `fit(model, train,
    budget)` replaces the default training and may return the model to
    evaluate (a classifier trained on the built model; `None`: the built
    one). `parameters(model)` replaces `count_params()`.
    """

    build: Callable[[], Any]
    train: Data | None = None
    test: Any = None
    fit: Callable | None = None
    parameters: Callable | None = None


def compare(
    models,
    train,
    test,
    budget,
    output_dir,
    results=None,
    seed=0,
    score=accuracy,
    resume=False,
):
    """Trains, times and evaluates every model of `models` and writes
    `output_dir/metrics.json` (again after each model: a stopped run keeps
    the rows it finished); returns the metrics dict.

    models: `{name: Model or build function}`, trained in this order.
    train: the training `Data`; test: the test `Data`, or `{test name:
    Data}` (each score `<test name>_<score>`). budget: a `Budget`.
    results: the run's description (data, budget, seed), first in
    metrics.json; each model's row follows under its name. score(model,
    test) -> `{score name: value}` (default: `accuracy`). resume: keep the
    rows of `models` that `output_dir/metrics.json` already holds, when
    that file describes the same run (`results`), and train the others.
    """
    results = dict(results or {})
    path = os.path.join(output_dir, "metrics.json")
    finished = finished_rows(path, results) if resume else {}
    # Rows of models this run leaves out stay in the file.
    results.update({name: row for name, row in finished.items() if name not in models})
    table = Table(list(models))
    os.makedirs(output_dir, exist_ok=True)
    for name, entry in models.items():
        if name in finished:
            results[name] = row = finished[name]
        else:
            entry = entry if isinstance(entry, Model) else Model(entry)
            results[name] = row = train_and_evaluate(
                entry, entry.train or train, entry.test or test, budget, seed, score
            )
            atomic.write_json(path, results)
        table.print_row(name, row)
    atomic.write_json(path, results)
    return results


def finished_rows(path, description):
    """The models' rows in the metrics.json at `path`, when it describes the
    run `description`; `{}` when there is no file yet."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        saved = json.load(f)
    if not isinstance(saved, dict):
        raise ValueError(f"--resume: {path} is not a metrics.json of this script")
    saved_description = {k: v for k, v in saved.items() if not is_row(v)}
    # JSON round trip: tuples become lists, as in the file.
    differs = sorted(
        key
        for key in set(saved_description) | set(description)
        if json.loads(json.dumps(description.get(key))) != saved_description.get(key)
    )
    if differs:
        raise ValueError(
            f"--resume: {path} is of another run (it differs in {', '.join(differs)}); "
            "pass another --output-dir or leave out --resume"
        )
    return {name: row for name, row in saved.items() if is_row(row)}


def is_row(value):
    """Whether a metrics.json entry is a model's row."""
    return isinstance(value, dict) and "train_seconds" in value


def train_and_evaluate(entry, train, test, budget, seed, score):
    """The row of one model: its size, scores and times."""
    keras.utils.set_random_seed(seed)
    model = entry.build()
    train, test = (data() if callable(data) else data for data in (train, test))
    start = time.perf_counter()
    trained = (entry.fit or fit)(model, train, budget) or model
    train_seconds = time.perf_counter() - start
    tests = test if isinstance(test, dict) else {None: test}
    scores, test_seconds = {}, 0.0
    for test_name, data in tests.items():
        start = time.perf_counter()
        values = score(trained, data)
        test_seconds += time.perf_counter() - start
        prefix = "" if test_name is None else f"{test_name}_"
        scores.update({prefix + key: value for key, value in values.items()})
    parameters = entry.parameters(trained) if entry.parameters else trained.count_params()
    return {
        **scores,
        "parameters": int(parameters),
        "trainable_parameters": int(sum(np.prod(w.shape) for w in trained.trainable_weights)),
        "train_seconds": round(train_seconds, 1),
        "train_samples_per_second": rate(budget.samples(len(train)), train_seconds),
        "test_samples_per_second": rate(sum(len(d) for d in tests.values()), test_seconds),
    }


def rate(count, seconds):
    return round(count / seconds, 1) if seconds > 0 else None


class Table:
    """The comparison's one table on stdout: the header before the first
    row, a row as each model finishes (a long run shows its progress).
    Scores named `*accuracy*` print as percentages."""

    TIMES = (
        ("train_seconds", "train s"),
        ("train_samples_per_second", "train/s"),
        ("test_samples_per_second", "test/s"),
    )

    def __init__(self, names):
        self.width = max([len("model"), *map(len, names)])
        self.columns = None

    def print_row(self, name, row):
        if self.columns is None:
            skip = {"parameters", "trainable_parameters", *dict(self.TIMES)}
            scores = [(key, label(key)) for key in row if key not in skip]
            self.columns = [("parameters", "parameters"), *scores, *self.TIMES]
            print(self.line("model", [label for _, label in self.columns]), flush=True)
        cells = [cell(key, row.get(key)) for key, _ in self.columns]
        print(self.line(name, cells), flush=True)

    def line(self, first, cells):
        widths = [max(10, len(label)) for _, label in self.columns]
        return f"{first:<{self.width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths))


def label(key):
    """A score's column: `exact_set_accuracy_2_objects` -> `exact set 2 objects`."""
    return key.replace("_accuracy", "").replace("_", " ")


def cell(key, value):
    if value is None:
        return "-"
    if "accuracy" in key:
        return f"{100 * value:.1f} %"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.1f}" if isinstance(value, float) else str(value)
