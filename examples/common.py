"""Shared command line, training loop and reporting of the example scripts.

Each example defines its model, data and optimiser and calls `run(...)`,
which parses the common flags, sets the dtype policy and the distribution,
trains with `model.fit`, validating each epoch on the share of the training
data that `--validation-fraction` holds out, evaluates on the test split
once, after training (nothing is selected on it), and writes
`training_log.csv`, `metrics.json`, `model.keras` and PNG figures.
"""

import argparse
import contextlib
import csv
import dataclasses
import importlib.util
import json
import math
import os
import sys
import time

import atomic
import backup
import keras  # Before tensorflow: torch and TF clash if TF loads first.
import numpy as np
from xla_flags import YNN_CONVOLUTIONS_OFF

from keras_capsules import distribute, routing

MIXED_PRECISION = ("float32", "mixed_float16", "mixed_bfloat16")
SMOKE_BATCH_SIZE = 4
SMOKE_STEPS = 2
# Fake examples per split of a --smoke run: the default 10 % validation
# share of them is one whole smoke batch.
SMOKE_EXAMPLES = 40
VALIDATION_FRACTION = 0.1
# The inputs that --monitor measures the routed layers on after each epoch.
MONITOR_IMAGES = 256


def parse_args(description, epochs, batch_size, routers=True, argv=None, add_arguments=None):
    """The example's command line: the common flags, `--router` with
    `routers`, the example's own (`add_arguments(parser)`), checked, with
    the `--smoke` and `--epochs` defaults applied."""
    parser = argparse.ArgumentParser(description=description)
    add_budget_arguments(parser, epochs, batch_size)
    if routers:
        add_router_argument(parser)
    add_location_arguments(parser)
    add_compute_arguments(parser)
    add_schedule_arguments(parser)
    add_run_arguments(parser)
    if add_arguments is not None:
        add_arguments(parser)
    return checked(parser, parser.parse_args(argv), epochs)


def add_budget_arguments(parser, epochs, batch_size):
    """`--epochs` and `--batch-size`."""
    parser.add_argument("--epochs", type=int, default=None, help=f"(default: {epochs}; --smoke: 1)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=batch_size,
        help="global batch size (split across devices with --distribute)",
    )


def add_router_argument(parser):
    """`--router`: the class capsules' router by its registered name."""
    parser.add_argument(
        "--router",
        choices=routing.names(),
        default=None,
        help="router of the class capsules, by its keras_capsules.routing "
        "name (default: the paper's)",
    )


def add_location_arguments(parser):
    """`--data-dir` and `--output-dir`."""
    parser.add_argument(
        "--data-dir",
        default=None,
        help="TFDS data dir (default: $TFDS_DATA_DIR or ~/tensorflow_datasets)",
    )
    parser.add_argument(
        "--output-dir", default=None, help="where logs, metrics, model and figures go"
    )


def add_compute_arguments(parser):
    """`--mixed-precision`, `--distribute`, `--jit-compile` and `--threads`:
    how the steps run, not what they compute."""
    parser.add_argument("--mixed-precision", choices=MIXED_PRECISION, default="float32")
    parser.add_argument(
        "--distribute",
        action="store_true",
        help="data-parallel: on all local devices (JAX, TensorFlow), or on "
        "all processes when started by a launcher (torchrun, TF_CONFIG, "
        "JAX_COORDINATOR_ADDRESS/JAX_NUM_PROCESSES/JAX_PROCESS_ID); "
        "see keras_capsules.distribute",
    )
    parser.add_argument(
        "--jit-compile",
        choices=("auto", "true", "false"),
        default="auto",
        help="compile the train step: XLA on TF and JAX, torch.compile on "
        "torch. auto: what measured faster (see resolve_jit_compile): "
        "jitted JAX; TF: XLA for CapsNet and Efficient-CapsNet, else "
        "only with a GPU; torch: torch.compile for CapsNet runs of "
        f"{TORCH_COMPILE_MIN_IMAGES:,}+ training images, else eager",
    )
    add_threads_argument(parser)


def add_threads_argument(parser):
    """`--threads`: the CPU threads of the backend's operations."""
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="CPU threads of each operation: torch.set_num_threads on torch, "
        "TensorFlow's intra-op threads; not on JAX, whose XLA sets its threads "
        "when it starts (default: the backend's, one per core). On a CPU that "
        "other jobs keep busy, --threads 1 runs torch several times faster",
    )


def check_threads(parser, args):
    """`--threads`: at least 1, and not on JAX."""
    if args.threads is None:
        return
    if args.threads < 1:
        parser.error(f"--threads must be >= 1. Received: --threads {args.threads}")
    if keras.backend.backend() == "jax":
        parser.error(
            "--threads is for torch and TensorFlow: XLA sets JAX's CPU threads when it "
            f"starts. Received: --threads {args.threads} on jax"
        )


# A CPU this busy (1-minute load average per core) slows torch's default
# threads down most: they wait for each other at every operation.
BUSY_LOAD_PER_CORE = 1.0


def set_threads(threads):
    """Sets the backend's CPU threads per operation (`None`: leaves the
    backend's default, one per core, and on torch prints a note when the
    CPU is busy).

    torch's threads wait for each other at the end of every operation, so
    when other processes hold the cores each step waits for the slowest.
    On a 2-core CPU at load 11-15, a training step of Efficient-CapsNet
    (batch 16, the quick start's) took 0.31-0.44 s on torch with 1 thread
    against 4.4-6.3 s with the default 2 (medians of 20 steps, 3 runs
    each). The thread count changes the order of the sums: the same seed
    repeats a run bit for bit only at the same count, so the default does
    not follow the load.
    """
    backend = keras.backend.backend()
    if threads is None:
        cores = os.cpu_count() or 1
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        if backend == "torch" and cores > 1 and load >= BUSY_LOAD_PER_CORE * cores:
            print(
                f"Note: the CPU is busy (load {load:.1f} on {cores} cores): torch's "
                "default threads wait for each other there; --threads 1 is often "
                "several times faster."
            )
        return
    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)


def add_schedule_arguments(parser):
    """`--validation-fraction`, `--steps-per-epoch` and `--time-budget`."""
    parser.add_argument(
        "--validation-fraction",
        type=float,
        default=VALIDATION_FRACTION,
        metavar="F",
        help="share of the training data held out as validation data, "
        "evaluated after each epoch with the test-time preprocessing "
        "(val_* columns of training_log.csv); 0: no validation "
        f"(default: {VALIDATION_FRACTION})",
    )
    parser.add_argument(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="limit the steps of each epoch (default: the whole split)",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help="stop training after the step that passes this wall time "
        "(the learning-rate schedule still plans --epochs); "
        "then evaluate as usual",
    )


def add_run_arguments(parser):
    """`--seed`, `--resume`, `--seeds` and `--smoke`: which runs, from where."""
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of Python, NumPy, TensorFlow and the backend "
        "(keras.utils.set_random_seed) and of the training data's order and "
        "augmentation (default: 0; recorded in metrics.json)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help=f"continue the run whose {backup.FILE_NAME} is in --output-dir (written "
        "after each epoch) at the epoch after it, on the batches the run would "
        "have seen; without a backup, train from the start; a finished run "
        "is not trained again",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="train this many runs, seeds SEED, SEED+1, ... (SEED: --seed "
        "or 0), each in OUTPUT_DIR/seed_<seed>; metrics.json gets the "
        "mean and std of their test accuracies",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_STEPS} steps per epoch, 1 epoch unless --epochs, on fake TFDS "
        "data (data.mock_data; for tests)",
    )
    parser.add_argument(
        "--monitor",
        action="store_true",
        help=f"measure every routed layer after each epoch on {MONITOR_IMAGES} validation "
        "(or test) images (keras_capsules.callbacks.CapsuleMonitor: starved capsules, "
        "coefficient entropy, ...): columns capsules/<layer>/<measure> in "
        "training_log.csv, figures capsule_monitor.png and capsule_monitor_routing.png, "
        "routing maps as TensorBoard images in tensorboard/capsules (with TensorFlow and "
        "TensorBoard installed)",
    )


def checked(parser, args, epochs):
    """`args` with `--smoke`'s batch size and steps and the default
    `--epochs` applied; a flag out of its range is the parser's error."""
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1. Received: --seeds {args.seeds}")
    if not 0 <= args.validation_fraction < 1:
        parser.error(
            "--validation-fraction must be in [0, 1). Received: "
            f"--validation-fraction {args.validation_fraction}"
        )
    if args.smoke:
        args.batch_size, args.steps_per_epoch = SMOKE_BATCH_SIZE, SMOKE_STEPS
    if args.epochs is None:
        args.epochs = 1 if args.smoke else epochs
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1. Received: --epochs {args.epochs}")
    check_threads(parser, args)
    return args


@contextlib.contextmanager
def distribution_scope(enabled):
    """Yields the `keras_capsules.distribute.Cluster` this process trains in.

    With `enabled`, the backend's data parallelism (`distribute.scope()`):
    all local devices of one process, or all processes of a multi-process
    run when the launcher's environment is present (torchrun's variables,
    TF_CONFIG, JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID).
    """
    backend = keras.backend.backend()
    if not enabled:
        yield distribute.Cluster(backend)
        return
    if backend == "torch" and distribute.launcher_environment(backend) is None:
        raise SystemExit(
            "--distribute on the torch backend runs one process per device: start "
            "the script with torchrun, e.g. `torchrun --nproc_per_node=2 "
            f"{os.path.basename(sys.argv[0])} --distribute ...` (see docs/distributed.md)."
        )
    with distribute.scope() as cluster:
        print(
            f"Data-parallel on {backend}: {cluster.replicas} replicas in "
            f"{cluster.num_processes} process(es), this is process {cluster.process_id}"
        )
        yield cluster


class Throughput(keras.callbacks.Callback):
    """Training images per second after the first `warmup` steps (compilation).

    Counts the time of the training steps of each epoch, not the
    validation after it.
    """

    def __init__(self, batch_size, warmup=3):
        super().__init__()
        self.batch_size, self.warmup = batch_size, warmup
        self.steps, self.last, self.seconds = 0, None, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.steps += 1
        if self.steps > self.warmup:
            self.seconds += now - self.last
        self.last = now

    @property
    def images_per_second(self):
        counted = self.steps - self.warmup
        if counted <= 0 or self.seconds <= 0:
            return None
        return counted * self.batch_size / self.seconds


class TrainingLog(keras.callbacks.Callback):
    """`training_log.csv`: a row per epoch, a column per value of `fit`'s epoch logs.

    Unlike `keras.callbacks.CSVLogger`, adds no empty `val_*` columns to a
    run without validation data. `rows`: those of the epochs before this
    `fit` (a resumed run's, from its backup). The file is rewritten whole
    after each epoch (`atomic.replacing`).
    """

    def __init__(self, path, rows=()):
        super().__init__()
        self.path, self.rows = path, [dict(row) for row in rows]

    def on_train_begin(self, logs=None):
        self.write()  # drops the rows a killed run wrote after its backup

    def on_epoch_end(self, epoch, logs=None):
        # Python floats, so a row reads the same from a backup and from logs.
        self.rows.append({"epoch": epoch, **{k: float(v) for k, v in (logs or {}).items()}})
        self.write()

    def write(self):
        columns = ["epoch", *sorted(self.rows[0].keys() - {"epoch"})] if self.rows else []
        with atomic.replacing(self.path) as temporary:
            with open(temporary, "w", newline="") as f:
                writer = csv.DictWriter(f, columns, restval="NA", extrasaction="ignore")
                if columns:
                    writer.writeheader()
                writer.writerows(self.rows)

    def history(self):
        """`{key: [value per epoch]}`, as `fit`'s `History`, of every epoch."""
        keys = [key for key in (self.rows[0] if self.rows else {}) if key != "epoch"]
        return {key: [row.get(key, math.nan) for row in self.rows] for key in keys}


class StopOnNonFinite(keras.callbacks.Callback):
    """`keras.callbacks.TerminateOnNaN` that says where: stops `fit` after
    the first step whose loss is NaN or infinite (a bad input batch, or
    weights gone bad) and records that step (`stopped_at`: epoch, batch,
    step over all epochs of this `fit`, loss)."""

    def __init__(self):
        super().__init__()
        self.steps, self.epoch, self.stopped_at = 0, 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        loss = (logs or {}).get("loss")
        if self.stopped_at is None and loss is not None and not math.isfinite(float(loss)):
            self.stopped_at = (self.epoch, batch, self.steps, float(loss))
            self.model.stop_training = True


class StepLog(keras.callbacks.Callback):
    """Each training step's loss and accuracy, for the training curves.

    Keras logs the mean over the epoch so far after each step; the value
    of step k of an epoch is recovered from those means as
    `k * mean_k - (k - 1) * mean_(k-1)`. That takes the batches to be of
    one size: a smaller last batch of an epoch gets a value between its
    own and the epoch's mean. `steps` counts the steps over all epochs,
    `values[key]` lists their values, `epoch_ends` the step that ended
    each epoch. A resumed run's log starts after `done_epochs` epochs of
    `steps_per_epoch` steps (their ends are known, their steps' values are not).
    """

    def __init__(self, keys=("loss", "accuracy"), done_epochs=0, steps_per_epoch=None):
        super().__init__()
        self.keys = keys
        self.steps, self.values = [], {key: [] for key in keys}
        self.epoch_ends = [(k + 1) * (steps_per_epoch or 0) for k in range(done_epochs)]
        self.first_step = done_epochs * (steps_per_epoch or 0)
        self.in_epoch, self.means = 0, {}

    def on_epoch_begin(self, epoch, logs=None):
        self.in_epoch, self.means = 0, {}

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        self.in_epoch += 1
        self.steps.append(self.first_step + len(self.steps) + 1)
        k = self.in_epoch
        for key in self.keys:
            mean = float(logs[key]) if key in logs else math.nan
            value = mean if k == 1 else k * mean - (k - 1) * self.means.get(key, math.nan)
            self.values[key].append(value)
            self.means[key] = mean

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_ends.append(self.first_step + len(self.steps))


class TimeBudget(keras.callbacks.Callback):
    """Stops `fit` after the first step that ends past `minutes` of training."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = 60.0 * minutes
        self.steps, self.stopped_at_step = 0, None

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.stopped_at_step is None and time.perf_counter() - self.start > self.seconds:
            self.stopped_at_step = self.steps
            self.model.stop_training = True  # Keras checks it after every step


# Training images from which torch.compile pays for itself (CapsNet, see
# resolve_jit_compile).
TORCH_COMPILE_MIN_IMAGES = 80_000


def resolve_jit_compile(
    flag, backend=None, xla_on_cpu=False, torch_compile=False, train_images=None
):
    """`--jit-compile` -> `model.compile(jit_compile=...)`.

    `"auto"` picks what measured faster for the train step
    (`benchmarks/train_step.py`; figures in `benchmarks/README.md`):

    - torch: `torch.compile` when `torch_compile` (the model measured faster
      compiled: CapsNet) and the run trains on at least
      `TORCH_COMPILE_MIN_IMAGES` images, enough to repay the compilation
      time and the first steps' recompilations; else eager.
      Efficient-CapsNet is faster eager, so its examples never compile on
      torch.
    - TensorFlow: XLA when `xla_on_cpu` (both CapsNet examples set it:
      they train faster with XLA on CPU), else `"auto"`: XLA on CPU too for
      the ready models whose `xla_on_cpu` is `True` (their `compile`; not
      under `--distribute`), Keras's own `"auto"`, XLA only with a GPU, for
      other models and the ready models measured slower with XLA.
    - JAX: Keras's `"auto"`, i.e. jit.
    """
    if flag != "auto":
        return flag == "true"
    backend = backend or keras.backend.backend()
    if backend == "torch":
        return bool(torch_compile and (train_images or 0) >= TORCH_COMPILE_MIN_IMAGES)
    if backend == "tensorflow" and xla_on_cpu:
        return True
    return "auto"


def steps_in(dataset):
    n = int(dataset.cardinality())
    return n if n > 0 else None


def use_xla_cpu_convolutions():
    """On JAX, turns off jaxlib's YNNPACK convolutions unless `XLA_FLAGS`
    already says how to treat them.

    XLA:CPU's own convolutions run Efficient-CapsNet's 3x3 convs 1.6-3x
    faster (forward + gradients, `benchmarks/README.md`), and with them
    `implementation="auto"` takes the native stride-1 conv
    (`keras_capsules.conv.ynn_convolutions_off`). XLA reads the flag when
    JAX starts its CPU backend: at the first computation, so this must run
    before any. A command-line run calls it; calls with `argv` (tests)
    leave the process's flags alone.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if keras.backend.backend() != "jax" or "ynn_fusion_type" in flags:
        return
    # An experimental flag, measured with jaxlib 0.10: XLA refuses to start
    # on flags it does not know, so only where it is known to exist.
    from importlib.metadata import version

    if version("jaxlib").split(".")[:2] == ["0", "10"]:
        os.environ["XLA_FLAGS"] = f"{flags} {YNN_CONVOLUTIONS_OFF}".strip()


def run(
    name,
    description,
    build_model,
    load_data,
    make_optimizer,
    figures=None,
    epochs=10,
    batch_size=32,
    routers=True,
    argv=None,
    add_arguments=None,
    callbacks=None,
    xla_on_cpu=False,
    torch_compile=False,
    metrics=None,
    score="accuracy",
    make_loss=None,
):
    """Trains, evaluates and reports one example; returns the metrics dict.

    build_model(args) -> keras.Model; load_data(args, batch_size, drop_remainder)
    -> (train, validation, test) tf.data datasets, `validation` the last
    `args.validation_fraction` of the training data with the test-time
    preprocessing (`None` when the fraction is 0); make_optimizer(args,
    steps_per_epoch); figures(model, test_dataset, output_dir, args) writes
    extra PNGs;
    add_arguments(parser) adds the example's own flags; callbacks(model, args,
    steps_per_epoch) -> extra `fit` callbacks; metrics: the compiled metrics
    (or a function that makes them), one named `score` (default: the
    model's own, `"auto"`); score: the
    metric reported as `test_<score>` and `validation_<score>` and drawn in
    the training curves (default `"accuracy"`; segmentation: `"dice"`);
    make_loss(args) -> the compiled loss (default: the ready model's own).
    Every test metric is in `metrics.json`'s `"test_metrics"`. `load_data`
    may return a dict of named test sets for `test`: each is evaluated
    (`test_<name>_<score>`, and all its metrics in `"test_sets"`), the
    first also as `test`.
    """
    call = dict(locals())  # this call's arguments, for run_seeds
    from figures import plot_history  # noqa: F401  Imports matplotlib only when running.

    if argv is None:  # a command-line run, before JAX's first computation
        use_xla_cpu_convolutions()

    args = parse_args(description, epochs, batch_size, routers, argv, add_arguments)
    set_threads(args.threads)  # before TensorFlow's first operation
    # One folder per backend: runs of one example on several backends side by side.
    output_dir = args.output_dir or os.path.join("runs", name, keras.backend.backend())
    os.makedirs(output_dir, exist_ok=True)
    if args.seeds > 1:
        return run_seeds(call, args, output_dir)
    import data  # TensorFlow's tf.data, when the run starts (not for --help)

    backup_path = os.path.join(output_dir, backup.FILE_NAME)
    state = resumed_state(args, output_dir, backup_path)
    if isinstance(state, dict):  # a finished run: its metrics
        return state
    # One seed for the weights, the data order and augmentation: the same
    # numbers each time a command runs (0 unless --seed says otherwise).
    seed = state.seed if state else args.seed
    seed = 0 if seed is None else seed
    keras.utils.set_random_seed(seed)
    keras.config.set_dtype_policy(args.mixed_precision)
    mock = data.mock_data(SMOKE_EXAMPLES) if args.smoke else contextlib.nullcontext()
    try:
        with mock, distribution_scope(args.distribute) as cluster:
            outcome = train_and_evaluate(call, args, cluster, seed, state, output_dir, backup_path)
    finally:
        keras.config.set_dtype_policy("float32")
    metrics = run_metrics(call, args, outcome, state)
    atomic.write_json(os.path.join(outcome.output_dir, "metrics.json"), metrics)
    if cluster.is_chief and not metrics["stopped_by_time_budget"] and os.path.exists(backup_path):
        os.remove(backup_path)  # finished: nothing to resume
    print(
        f"Test {score} {outcome.test_score:.4f}; "
        f"{metrics['images_per_second'] or math.nan:.1f} "
        f"training images/s on {metrics['backend']}; outputs in {outcome.output_dir}"
    )
    return metrics


@dataclasses.dataclass
class Outcome:
    """What a run trained and measured, for its `metrics.json`."""

    model: object
    cluster: object
    seed: int
    first_epoch: int
    steps: int
    output_dir: str
    fit: object  # FitCallbacks
    train_seconds: float
    history: dict
    results: dict  # the test set's metrics
    named_results: dict  # {name: metrics} of named test sets

    @property
    def test_score(self):
        return self.results[self.fit.score]


def train_and_evaluate(call, args, cluster, seed, state, output_dir, backup_path):
    """The run inside its distribution scope: data, model, `fit`, the test
    evaluation and the saved model and figures; an `Outcome`."""
    import data

    first_epoch = state.epochs_done if state else 0
    if cluster.multi_process:  # Every process: process 0's seed (one drew it).
        seed = cluster.chief_value(seed)
        keras.utils.set_random_seed(seed)
    args.epoch_order = data.EpochOrder(
        seed, first_epoch, max(args.epochs - first_epoch, 1), args.steps_per_epoch
    )
    if not cluster.is_chief:  # Every process writes; process 0 to --output-dir.
        output_dir = os.path.join(output_dir, f"process{cluster.process_id}")
        os.makedirs(output_dir, exist_ok=True)
    train, validation, test, test_sets = load_splits(call["load_data"], args, cluster.replicas)
    # A loader that follows args.epoch_order gives the epochs in
    # sequence: fit takes that many batches per epoch.
    per_epoch = data.batches_per_epoch(train)
    fit_steps = args.steps_per_epoch if per_epoch is None else per_epoch
    steps = fit_steps or steps_in(train)
    model = build_and_compile(call, args, steps)
    if state is not None:
        backup.restore(model, state)
        print(f"Resumed from {backup_path}: {first_epoch} of {args.epochs} epochs done")
    fit = FitCallbacks(call, args, model, steps, state, output_dir, backup_path, seed, cluster)
    if args.monitor:
        # First: the training log writes the measures it adds to the logs.
        fit.callbacks.insert(0, capsule_monitor(validation or test, output_dir))
    start = time.perf_counter()
    if first_epoch < args.epochs:
        distribute.fit(
            model,
            train,
            epochs=args.epochs,
            initial_epoch=first_epoch,
            steps_per_epoch=fit_steps,
            callbacks=fit.callbacks,
            validation_data=validation,
            verbose=2 if args.smoke else "auto",
        )
    train_seconds = time.perf_counter() - start
    if fit.non_finite.stopped_at is not None:
        raise SystemExit(non_finite_message(fit.non_finite.stopped_at, fit.backups, backup_path))
    history = fit.training_log.history()
    results, named_results = evaluate_tests(model, test, test_sets, args)
    save_outputs(call, args, model, test, history, fit, output_dir)
    return Outcome(
        model=model,
        cluster=cluster,
        seed=seed,
        first_epoch=first_epoch,
        steps=steps,
        output_dir=output_dir,
        fit=fit,
        train_seconds=train_seconds,
        history=history,
        results=results,
        named_results=named_results,
    )


def load_splits(load_data, args, replicas):
    """`(train, validation, test, test_sets)` of the example's `load_data`:
    `test_sets` its dict of named test sets (`{}` for one test set), `test`
    the first of them. A validation share of no whole batch is refused."""
    train, validation, test = load_data(args, args.batch_size, drop_remainder=replicas > 1)
    # A dict of named test sets: each is evaluated, the first is `test`.
    test_sets = test if isinstance(test, dict) else {}
    test = next(iter(test_sets.values())) if test_sets else test
    if validation is not None and int(validation.cardinality()) == 0:
        raise SystemExit(
            f"--validation-fraction {args.validation_fraction} holds out less than "
            f"one batch of {args.batch_size}: raise it, or pass 0 for no validation."
        )
    return train, validation, test, test_sets


def build_and_compile(call, args, steps):
    """The example's model, compiled with its optimizer, metrics and loss,
    and the train step's compilation `--jit-compile` resolves to."""
    model = call["build_model"](args)
    # Keras's "auto" keeps XLA off under tf.distribute; so do we.
    jit = resolve_jit_compile(
        args.jit_compile,
        xla_on_cpu=call["xla_on_cpu"] and not args.distribute,
        torch_compile=call["torch_compile"],
        train_images=(steps or 0) * args.epochs * args.batch_size,
    )
    metrics, make_loss = call["metrics"], call["make_loss"]
    # metrics "auto": the ready models' accuracy (for several digits
    # per image, keras_capsules.metrics.LabelSetAccuracy).
    model.compile(
        optimizer=call["make_optimizer"](args, steps or 1),
        metrics=(metrics() if callable(metrics) else metrics) or "auto",
        jit_compile=jit,
        **({} if make_loss is None else {"loss": make_loss(args)}),
    )
    return model


def capsule_monitor(dataset, output_dir):
    """A `CapsuleMonitor` on the first `MONITOR_IMAGES` inputs of `dataset`
    (batches of `(inputs, labels)`), its figures in `output_dir`."""
    from keras_capsules.callbacks import CapsuleMonitor

    inputs, labels = [], []
    for x, y in dataset.unbatch().take(MONITOR_IMAGES).batch(MONITOR_IMAGES):
        inputs, labels = np.asarray(x), np.asarray(y)
    # Routing maps as TensorBoard images where tf.summary can write them.
    tensorboard = all(importlib.util.find_spec(m) for m in ("tensorflow", "tensorboard"))
    return CapsuleMonitor(
        inputs,
        labels,
        figure_path=os.path.join(output_dir, "capsule_monitor.png"),
        log_dir=os.path.join(output_dir, "tensorboard") if tensorboard else None,
    )


class FitCallbacks:
    """The callbacks of a run's `fit`, in their order (`callbacks`), and by
    name for what they measured: `throughput`, `step_log` (None for a
    resumed run without a known epoch length: its curves per epoch),
    `training_log`, `budget` (None without `--time-budget`), `non_finite`
    and `backups` (written by process 0 only)."""

    def __init__(self, call, args, model, steps, state, output_dir, backup_path, seed, cluster):
        first_epoch = state.epochs_done if state else 0
        self.score = call["score"]
        self.throughput = Throughput(args.batch_size, warmup=1 if args.smoke else 3)
        self.step_log = (
            StepLog(("loss", self.score), first_epoch, steps) if steps or not first_epoch else None
        )
        self.training_log = TrainingLog(
            os.path.join(output_dir, "training_log.csv"), state.log_rows if state else ()
        )
        self.callbacks = [
            self.training_log,
            self.throughput,
            *([self.step_log] if self.step_log else []),
        ]
        if call["callbacks"] is not None:
            self.callbacks += call["callbacks"](model, args, steps or 1)
        self.budget = None if args.time_budget is None else TimeBudget(args.time_budget)
        if self.budget is not None:
            self.callbacks.append(self.budget)
        self.non_finite = StopOnNonFinite()
        # Last: it backs up the rows training_log has just added.
        self.backups = backup.TrainingBackup(backup_path, seed, self.training_log, first_epoch)
        self.callbacks.append(self.non_finite)
        if cluster.is_chief:  # Process 0 writes; every process resumes from it.
            self.callbacks.append(self.backups)

    @property
    def stopped_by_time_budget(self):
        return self.budget is not None and self.budget.stopped_at_step is not None


def evaluate_tests(model, test, test_sets, args):
    """The metrics dict of `test` and `{name: metrics dict}` of the named
    test sets (`test` among them is not evaluated twice)."""
    test_steps = SMOKE_STEPS if args.smoke else None
    # A dict: callbacks may add metrics (e.g. the spread-loss margin).
    results = distribute.evaluate(model, test, steps=test_steps)
    named_results = {
        name: results if dataset is test else distribute.evaluate(model, dataset, steps=test_steps)
        for name, dataset in test_sets.items()
    }
    return results, named_results


def save_outputs(call, args, model, test, history, fit, output_dir):
    """`model.keras`, the training curves and the example's own figures."""
    from figures import plot_history

    atomic.save_model(model, os.path.join(output_dir, "model.keras"))
    plot_history(
        history,
        os.path.join(output_dir, "training_curves.png"),
        fit.step_log,
        score=fit.score,
    )
    if call["figures"] is not None:
        call["figures"](model, test, output_dir, args)


def run_metrics(call, args, outcome, state):
    """The run's `metrics.json`: what trained, on what budget, its
    validation and test results, its speed and how it ran."""
    score, history, fit = call["score"], outcome.history, outcome.fit
    results, named_results = outcome.results, outcome.named_results
    argv = call["argv"]
    return {
        "model": type(outcome.model).__name__,
        "example": call["name"],
        "backend": keras.backend.backend(),
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "steps_per_epoch": outcome.steps,
        "validation_fraction": args.validation_fraction,
        # The last epoch's validation results (None without validation).
        f"validation_{score}": last(history.get(f"val_{score}")),
        "validation_loss": last(history.get("val_loss")),
        f"test_{score}": float(results[score]),
        "test_loss": float(results["loss"]),
        "test_metrics": {key: float(value) for key, value in results.items()},
        **{f"test_{name}_{score}": float(result[score]) for name, result in named_results.items()},
        "test_sets": {
            name: {key: float(value) for key, value in result.items()}
            for name, result in named_results.items()
        },
        "parameters": int(outcome.model.count_params()),
        "images_per_second": fit.throughput.images_per_second,
        "train_seconds": outcome.train_seconds,
        "mixed_precision": args.mixed_precision,
        "threads": args.threads,  # None: the backend's default
        "distribute": args.distribute,
        "replicas": outcome.cluster.replicas,
        "processes": outcome.cluster.num_processes,
        "router": getattr(args, "router", None),
        "smoke": args.smoke,
        "seed": outcome.seed,
        "resumed_at_epoch": outcome.first_epoch if state else None,
        "time_budget_minutes": args.time_budget,
        "trained_steps": fit.throughput.steps,  # all epochs; fewer when the budget stopped it
        "stopped_by_time_budget": fit.stopped_by_time_budget,
        **getattr(args, "extra_metrics", {}),  # set by an example's load_data
        "command": " ".join(
            [os.path.basename(sys.argv[0])] + list(sys.argv[1:] if argv is None else argv)
        ),
    }


def resumed_state(args, output_dir, backup_path):
    """The `backup.TrainingState` to resume from (`None`: train from the
    start), or, for `--resume` of a run that finished, its metrics."""
    if not args.resume:
        if os.path.exists(backup_path):
            print(f"Training from the start (no --resume): {backup_path} will be replaced.")
        return None
    try:
        state = backup.read(backup_path)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    metrics_path = os.path.join(output_dir, "metrics.json")
    if state is None and os.path.exists(metrics_path):
        with open(metrics_path) as f:
            metrics = json.load(f)
        if not metrics.get("stopped_by_time_budget"):
            print(
                f"{output_dir} holds a finished run (metrics.json, no backup): not trained again."
            )
            return metrics
    if state is not None and args.seed is not None and args.seed != state.seed:
        raise SystemExit(
            f"{backup_path} continues the run of --seed {state.seed}. "
            f"Received: --seed {args.seed} (pass the same seed, or none)."
        )
    return state


def non_finite_message(stopped_at, backups, backup_path):
    epoch, batch, step, loss = stopped_at
    done = backups.epochs_done
    last_good = (
        f"The last good backup, after epoch {done}, is {backup_path}: fix the data or the "
        "flags, then continue with --resume."
        if done
        else "No epoch finished, so there is no backup to resume from."
    )
    return (
        f"Training stopped at step {step} of this run (epoch {epoch + 1}, batch {batch + 1}): "
        f"the loss is {loss}, from a NaN or Inf in that batch or in the weights. {last_good}"
    )


def last(values):
    return float(values[-1]) if values else None


PER_RUN = (
    "test_accuracy",
    "test_dice",
    "test_metrics",
    "test_loss",
    "images_per_second",
    "train_seconds",
    "seed",
    "command",
    "trained_steps",
    "stopped_by_time_budget",
    "validation_accuracy",
    "validation_dice",
    "validation_loss",
)


def run_seeds(call, args, output_dir):
    """`--seeds N`: `run` once per seed, then the mean and std of the test
    scores (accuracies, or the example's `score`).

    Every run trains and evaluates the same way; none is picked over the
    others (the test set selects nothing), so the spread is the honest one.
    """
    argv = list(sys.argv[1:] if call["argv"] is None else call["argv"])
    first = args.seed or 0
    runs = []
    for seed in range(first, first + args.seeds):
        seed_argv = argv + [
            "--seeds",
            "1",
            "--seed",
            str(seed),
            "--output-dir",
            os.path.join(output_dir, f"seed_{seed}"),
        ]
        runs.append(run(**{**call, "argv": seed_argv}))
    score = call["score"]
    accuracies = [r[f"test_{score}"] for r in runs]
    # Every test score: test_<score> and those of named test sets.
    scores = [k for k in runs[0] if k.startswith("test_") and k.endswith(f"_{score}")]
    spread = {}
    for key in scores:
        values = [r[key] for r in runs]
        mean = sum(values) / len(values)
        spread[f"{key}_mean"] = mean
        # The sample standard deviation (ddof=1).
        spread[f"{key}_std"] = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    mean = spread[f"test_{score}_mean"]
    std = spread[f"test_{score}_std"]
    metrics = {
        # What the runs share (model, data, budget); per-run values are in "runs".
        **{
            k: v
            for k, v in runs[0].items()
            if k not in PER_RUN and k not in scores and k != "test_sets"
        },
        "seeds": list(range(first, first + args.seeds)),
        **spread,
        "test_accuracies" if score == "accuracy" else f"test_{score}_values": accuracies,
        "train_seconds": sum(r["train_seconds"] for r in runs),
        "runs": runs,
        "command": " ".join([os.path.basename(sys.argv[0])] + argv),
    }
    atomic.write_json(os.path.join(output_dir, "metrics.json"), metrics)
    print(
        f"Test {score} over {args.seeds} seeds: {100 * mean:.2f} +- {100 * std:.2f} % "
        f"(mean +- sample std); outputs in {output_dir}"
    )
    return metrics
