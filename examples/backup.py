"""The training state a killed run resumes from (`--resume`).

`TrainingBackup` plays the part of `keras.callbacks.BackupAndRestore` with
`save_freq="epoch"`: after each epoch that trained all its steps it backs up
the model's variables (its weights and non-trainable state, such as the
seed generators of dropout), the optimizer's (the step count that drives
the learning-rate schedule, the moments), the epoch count, the run's seed
and the `training_log.csv` rows. A resumed run restores them and goes on
with the next epoch; a killed epoch is trained again from its start, on the
same batches (`data.EpochOrder`), so it ends as the uninterrupted run does.

Unlike `BackupAndRestore`, it writes one file, `backup.npz`, atomically
(`atomic.replacing`): a kill during a save leaves the previous backup, never
weights of one epoch beside the epoch count of another. The file holds
arrays and a JSON header only (read without pickle), and the backup is read
before the data pipeline is built, which starts at the backed-up epoch.
"""

import json
import os
import zipfile

import atomic
import keras
import numpy as np

FORMAT = "keras-capsules-training-backup/1"
FILE_NAME = "backup.npz"


class TrainingState:
    """What a backup holds: `epochs_done`, `seed`, `log_rows` (the
    training-log rows so far), and the variables: `(paths, values)` of the
    model's and of the optimizer's, in their order."""

    def __init__(self, path, epochs_done, seed, log_rows, variables, optimizer_variables):
        self.path, self.epochs_done, self.seed = path, epochs_done, seed
        self.log_rows = log_rows
        self.variables, self.optimizer_variables = variables, optimizer_variables


def _damaged(path, what):
    return ValueError(
        f"{path} is not a usable training backup: {what}. Delete it to train from the start."
    )


def read(path):
    """The `TrainingState` in `path`, or `None` when there is no such file.

    Raises `ValueError` naming the file when it is truncated, corrupted or
    not a backup of this format.
    """
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            header = json.loads(str(f["header"]))
            arrays = {key: f[key] for key in f.files if key != "header"}
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise _damaged(path, f"it cannot be read ({type(error).__name__}: {error})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _damaged(path, f"its header is not {FORMAT!r}")
    epochs, seed, rows = header.get("epochs_done"), header.get("seed"), header.get("log_rows")
    if not (isinstance(epochs, int) and epochs >= 0 and isinstance(seed, int)):
        raise _damaged(path, f"epochs_done={epochs!r}, seed={seed!r}")
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise _damaged(path, "its training-log rows are not a list of rows")
    groups = {}
    for group in ("variables", "optimizer_variables"):
        paths = header.get(group)
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise _damaged(path, f"its list of {group} is missing")
        missing = [p for i, p in enumerate(paths) if f"{group}/{i}" not in arrays]
        if missing:
            raise _damaged(path, f"it lacks the values of {missing[:3]}")
        groups[group] = (paths, [arrays[f"{group}/{i}"] for i in range(len(paths))])
    return TrainingState(
        path, epochs, seed, rows, groups["variables"], groups["optimizer_variables"]
    )


def _assign(variables, backed_up, what, path):
    """Each variable's backed-up value, after checking that the backup is
    of this model: as many variables, of the same shapes, in the same order.
    (Their names are not compared: Keras numbers layer names per process.)"""
    paths, values = backed_up
    shapes = [tuple(v.shape) for v in variables]
    if shapes != [value.shape for value in values]:
        raise ValueError(
            f"{path} backs up another model or optimizer: its {len(values)} {what} "
            f"({', '.join(paths[:3])}, ...) do not have the shapes of this run's "
            f"{len(shapes)}. Resume with the flags of the run that wrote it, or delete "
            "it to train from the start."
        )
    for variable, value in zip(variables, values):
        variable.assign(value)


def restore(model, state):
    """Loads `state` into a compiled `model` and its optimizer."""
    model.optimizer.build(model.trainable_variables)
    _assign(model.variables, state.variables, "variables", state.path)
    _assign(model.optimizer.variables, state.optimizer_variables, "optimizer variables", state.path)


def write(path, model, epochs_done, seed, log_rows):
    groups = {"variables": model.variables, "optimizer_variables": model.optimizer.variables}
    header = {"format": FORMAT, "epochs_done": epochs_done, "seed": seed, "log_rows": log_rows}
    header.update({group: [v.path for v in variables] for group, variables in groups.items()})
    arrays = {"header": np.array(json.dumps(header))}
    for group, variables in groups.items():
        for i, variable in enumerate(variables):
            arrays[f"{group}/{i}"] = keras.ops.convert_to_numpy(variable)
    with atomic.replacing(path) as temporary:
        with open(temporary, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())


class TrainingBackup(keras.callbacks.Callback):
    """Writes `path` after each epoch that trained all its steps to a finite
    loss (not one that a time budget or a NaN stopped).

    seed: the run's seed, kept for the resumed run's data order;
    training_log: the `TrainingLog` whose rows go into the backup (place
    this callback after it); epochs_done: the epochs before this `fit`.
    """

    def __init__(self, path, seed, training_log, epochs_done=0):
        super().__init__()
        self.path, self.seed, self.training_log = path, seed, training_log
        self.epochs_done = epochs_done
        self.batches = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1

    def on_epoch_end(self, epoch, logs=None):
        steps = self.params.get("steps")
        loss = (logs or {}).get("loss")
        finished = steps is None or self.batches >= steps
        if not finished or loss is None or not np.isfinite(float(loss)):
            return
        self.epochs_done = epoch + 1
        write(self.path, self.model, self.epochs_done, self.seed, self.training_log.rows)
