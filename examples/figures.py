"""Matplotlib figures of the examples: training curves and capsule views."""

import itertools

import atomic
import matplotlib

matplotlib.use("Agg")  # Scripts run headless.
import keras  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

DIGITS = tuple(str(digit) for digit in range(10))  # MNIST's class names


def moving_average(values, window):
    """Means of the last `window` values (fewer at the start), NaNs skipped."""
    values = np.asarray(values, dtype="float64")
    known = np.isfinite(values)
    sums = np.cumsum(np.where(known, values, 0.0))
    counts = np.cumsum(known)
    sums[window:] = sums[window:] - sums[:-window]
    counts[window:] = counts[window:] - counts[:-window]
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


def plot_history(history, path, step_log=None, score="accuracy"):
    """Loss and `score` (a metric's name) against the training step, with
    the validation results.

    history: `fit`'s `History.history` (per epoch; `val_*` with validation
    data). step_log: a `common.StepLog` of the same run: then each step's
    value is drawn, with their moving average over about a fiftieth of the
    run, so one epoch is a curve too; without it the x axis counts epochs.
    Markers: each epoch's training result (its mean) and, when there is
    one, its validation result, at the step that ended the epoch.
    """
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    epochs = len(history.get("loss", []))
    per_step = step_log is not None and len(step_log.steps) > 0
    ends = step_log.epoch_ends[:epochs] if per_step else list(range(1, epochs + 1))
    for ax, key in zip(axes, ("loss", score)):
        if per_step and key in step_log.values:
            values = step_log.values[key]
            window = max(1, round(len(values) / 50))
            if window > 1:
                ax.plot(
                    step_log.steps,
                    values,
                    "-",
                    color="tab:blue",
                    linewidth=0.6,
                    alpha=0.35,
                    label="training, each step",
                )
            else:  # few steps: each one marked
                ax.plot(
                    step_log.steps,
                    values,
                    ".-",
                    color="tab:blue",
                    linewidth=1,
                    label="training, each step",
                )
            if window > 1:
                ax.plot(
                    step_log.steps,
                    moving_average(values, window),
                    "-",
                    color="tab:blue",
                    linewidth=1.5,
                    label=f"training, mean of {window} steps",
                )
        for prefix, style, color, label in (
            ("", "o", "tab:blue", "training, epoch mean"),
            ("val_", "s--", "tab:orange", "validation, after each epoch"),
        ):
            values = history.get(prefix + key)
            if values:
                ax.plot(ends[: len(values)], values, style, color=color, label=label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("training step" if per_step else "epoch")
        ax.set_title(key)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=100)
    plt.close(fig)


def plot_accuracy_by_angle(results, angles, path):
    """Test accuracy against the rotation angle, one line per model and
    axis: from a rotation study's metrics (`<model>` rows holding
    `in_plane_<angle>_accuracy` and `out_of_plane_<angle>_accuracy`)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, axis in zip(axes, ("in_plane", "out_of_plane")):
        for name, row in results.items():
            if isinstance(row, dict) and f"{axis}_{angles[0]:g}_accuracy" in row:
                ax.plot(angles, [row[f"{axis}_{a:g}_accuracy"] for a in angles], "o-", label=name)
        ax.set_title(axis.replace("_", " ") + " rotation")
        ax.set_xlabel("angle (degrees)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=100)
    plt.close(fig)


def _name(class_names, index):
    index = int(index)
    if class_names is not None and 0 <= index < len(class_names):
        return str(class_names[index])
    return str(index)


def _show(ax, image):
    image = np.asarray(image, dtype="float32")
    if image.shape[-1] == 1:
        ax.imshow(image[..., 0], cmap="gray", vmin=0, vmax=1)
    elif image.shape[-1] == 3:  # RGB in [0, 1]
        ax.imshow(np.clip(image, 0, 1))
    else:  # Stereo pairs: the first camera.
        ax.imshow(image[..., 0], cmap="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_reconstructions(model, images, labels, path, class_names=None):
    """Test images (top row) and their reconstructions from the longest
    capsule, titled with the true and the predicted class (`class_names`,
    else the class ids); returns the images' class-capsule poses."""
    # One batch shape for every model call here: eager JAX compiles each op
    # once per shape (a second shape doubled a CapsNet smoke run's figures).
    poses = ops.convert_to_numpy(model.encode(ops.convert_to_tensor(images), training=False))
    predictions = np.linalg.norm(poses, axis=-1).argmax(-1)  # the model's scores
    # `model.reconstruct(images)` without encoding the images a second time:
    # the longest capsule kept, the others zeroed, decoded.
    longest = np.eye(poses.shape[1], dtype=poses.dtype)[predictions][..., None]
    decoded = ops.convert_to_numpy(model.decode(poses * longest))
    # At least 6 inches wide: room for the title above few images.
    fig, axes = plt.subplots(
        2, len(images), figsize=(max(1.5 * len(images), 6.0), 3.4), squeeze=False
    )
    for k in range(len(images)):
        _show(axes[0, k], images[k])
        # One title per column: a title on the lower row overlaps the upper.
        axes[0, k].set_title(
            f"true {_name(class_names, labels[k])}\npred {_name(class_names, predictions[k])}",
            fontsize=8,
        )
        _show(axes[1, k], decoded[k])
    fig.suptitle("Input (top) and reconstruction from the longest capsule (bottom)", fontsize=10)
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=100)
    plt.close(fig)
    return poses


# Sabour et al.'s perturbations of one pose dimension.
PERTURBATION_STEPS = np.linspace(-0.25, 0.25, 11)
#: The dimensions shown: those whose perturbation changes the picture most.
PERTURBATION_DIMS = 6
#: Below this mean pixel change across the steps (a fraction of the
#: reconstructions' largest value: 1 for images in [0, 1]), no dimension
#: visibly changes the reconstruction (an undertrained decoder): no figure.
MIN_VISIBLE_CHANGE = 0.01


def plot_perturbations(
    model, poses, path, steps=PERTURBATION_STEPS, class_names=None, dims_shown=PERTURBATION_DIMS
):
    """Sabour et al. Fig. 4: tweak each dimension of the winning capsule, decode.

    `poses`: one image's class-capsule poses `(num_classes, dim)`. Row d
    shows the reconstruction when dimension d of the predicted class
    capsule is shifted by each value of `steps`, the other capsules zeroed;
    the `dims_shown` dimensions that change it most, in order. Returns
    whether it wrote the figure: not when no dimension changes the
    reconstruction visibly (mean pixel change under `MIN_VISIBLE_CHANGE`),
    as after a short run.
    """
    winner = int(np.linalg.norm(poses, axis=-1).argmax())
    dims = poses.shape[-1]
    batch = np.zeros((dims, len(steps)) + poses.shape, dtype="float32")
    batch[:, :, winner] = poses[winner]
    for d in range(dims):
        batch[d, :, winner, d] += steps
    decoded = ops.convert_to_numpy(model.decode(batch.reshape((-1,) + poses.shape)))
    decoded = decoded.reshape((dims, len(steps)) + decoded.shape[1:])
    single_channel = decoded.shape[-1] == 1
    decoded = decoded[..., 0]  # stereo pairs: the first camera, as _show
    # Each dimension's effect: the mean absolute change from the unperturbed picture.
    middle = decoded[:, len(steps) // 2 : len(steps) // 2 + 1]
    change = np.abs(decoded - middle).mean(axis=(1, 2, 3))
    if change.max() <= MIN_VISIBLE_CHANGE * np.abs(decoded).max():
        print(
            f"perturbations.png not written: no pose dimension changes the reconstruction "
            f"visibly yet (largest mean pixel change {change.max():.4f})"
        )
        return False
    shown = np.sort(np.argsort(change)[::-1][: min(dims_shown, dims)])
    decoded = decoded[shown]
    # One mosaic, one axes: 16 x 11 subplots took matplotlib ~3 s.
    height, width = decoded.shape[2:]
    mosaic = np.full(
        (len(shown) * (height + 1) - 1, len(steps) * (width + 1) - 1),
        decoded.max(),
        dtype="float32",
    )  # white gaps
    for row in range(len(shown)):
        for s in range(len(steps)):
            mosaic[
                row * (height + 1) : row * (height + 1) + height,
                s * (width + 1) : s * (width + 1) + width,
            ] = decoded[row, s]
    fig, ax = plt.subplots(figsize=(len(steps) * 1.0 + 1.0, len(shown) * 1.0 + 1.0))
    if single_channel:
        ax.imshow(mosaic, cmap="gray", vmin=0, vmax=1)
    else:
        ax.imshow(mosaic, cmap="gray")
    ax.set_yticks(
        [row * (height + 1) + height / 2 for row in range(len(shown))],
        [f"dim {d}" for d in shown],
        fontsize=10,
    )
    ax.set_xticks(
        [s * (width + 1) + width / 2 for s in range(len(steps))],
        [f"{step:+.2f}" for step in steps],
        fontsize=9,
        rotation=45,
    )
    ax.set_xlabel("added to the dimension", fontsize=10)
    ax.set_title(
        f"The {len(shown)} of {dims} dimensions of the {_name(class_names, winner)!r} "
        "capsule that change it most",
        fontsize=11,
    )
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=100)
    plt.close(fig)
    return True


def plot_routing(model, images, labels, path, child_types=None, class_names=None):
    """Mean coupling coefficients from child capsules to each class capsule.

    With `child_types` (capsule types per position, e.g. 32 for CapsNet)
    the children are averaged over positions, so rows are capsule types.
    Columns: the class capsules, named by `class_names` (else their ids);
    averaged over the images given.
    """
    coefficients = ops.convert_to_numpy(model.routing_coefficients(images)).astype("float32")
    mean = coefficients.mean(axis=0)
    if child_types:
        mean = mean.reshape(-1, child_types, mean.shape[-1]).mean(axis=0)
    children, classes = mean.shape
    fig, ax = plt.subplots(
        figsize=(max(6.0, 0.5 * classes + 2), min(max(3.0, children * 0.18), 12.0))
    )
    im = ax.imshow(mean, aspect="auto", cmap="viridis", interpolation="nearest")
    names = [_name(class_names, c) for c in range(classes)]
    ax.set_xticks(
        range(classes),
        names,
        rotation=45 if max(map(len, names)) > 2 else 0,
        ha="right" if max(map(len, names)) > 2 else "center",
    )
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("class capsule")
    ax.set_ylabel("child capsule type" if child_types else "child capsule")
    ax.set_title(f"Mean routing coefficients over {len(images)} test images")
    fig.colorbar(im, ax=ax, label="coupling coefficient (child to class)")
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=100, bbox_inches="tight")  # with the colour bar's label
    plt.close(fig)


def plot_routing_maps(model, images, labels, path, child_types, class_names=None):
    """Where each class capsule takes its input from: for the images of
    each class, the mean routing coefficient from the child capsules at
    each place of their grid (types averaged) to that class's capsule.

    Top row: the mean image of the class; bottom row: its routing map over
    the children's grid (assumed square), brighter where the children
    route more of their votes to the class. The coefficients come from the
    class-capsule layer called with `return_coefficients=True`
    (`model.routing_coefficients`).
    """
    images = np.asarray(images, dtype="float32")
    labels = np.asarray(labels).reshape(-1)
    coefficients = ops.convert_to_numpy(model.routing_coefficients(images)).astype("float32")
    batch, children, classes = coefficients.shape
    side = int(round((children // child_types) ** 0.5))
    if side * side * child_types != children:
        return  # not a square grid of `child_types` capsules per place
    grid = coefficients.reshape(batch, side, side, child_types, classes).mean(axis=3)
    present = [c for c in range(classes) if np.any(labels == c)]
    fig, axes = plt.subplots(
        2, len(present), figsize=(1.3 * len(present) + 0.6, 3.0), squeeze=False
    )
    # One colour scale for every class: from the least to the most routed place.
    means = {c: grid[labels == c, :, :, c].mean(axis=0) for c in present}
    low, top = min(m.min() for m in means.values()), max(m.max() for m in means.values())
    for col, c in enumerate(present):
        axes[0, col].imshow(images[labels == c].mean(axis=0)[..., 0], cmap="gray")
        axes[0, col].set_title(_name(class_names, c))
        im = axes[1, col].imshow(means[c], cmap="magma", vmin=low, vmax=top)
        for ax in axes[:, col]:
            ax.set_xticks([])
            ax.set_yticks([])
    axes[1, 0].set_ylabel("routing\nto class")
    fig.colorbar(im, ax=axes[1, :].tolist(), fraction=0.02, label="coefficient")
    fig.suptitle(f"Routing maps over the {side} x {side} child grid ({batch} test images)")
    atomic.save_figure(fig, path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def capsule_figures(child_types=None, class_names=None):
    """The `figures` hook of the capsule examples: reconstructions,
    perturbations (models with a decoder) and routing heat map.

    class_names: the names of the class ids, or `None` for the
    `class_names` the example's `load_data` set on `args` (else ids).
    """

    def figures(model, test, output_dir, args=None):
        import os

        names = class_names if class_names is not None else getattr(args, "class_names", None)
        batches = [(np.asarray(x), np.asarray(y)) for x, y in itertools.islice(iter(test), 4)]
        all_images = np.concatenate([x for x, _ in batches])[:512]
        all_labels = np.concatenate([y for _, y in batches])[:512]
        images, labels = all_images[:8], all_labels[:8]
        if getattr(model, "reconstruction", False):
            poses = plot_reconstructions(
                model, images, labels, os.path.join(output_dir, "reconstructions.png"), names
            )
            plot_perturbations(
                model, poses[0], os.path.join(output_dir, "perturbations.png"), class_names=names
            )
        plot_routing(
            model, images, labels, os.path.join(output_dir, "routing.png"), child_types, names
        )
        if child_types and all_labels.ndim == 1:
            plot_routing_maps(
                model,
                all_images,
                all_labels,
                os.path.join(output_dir, "routing_maps.png"),
                child_types,
                names,
            )

    return figures


def plot_segmentation(model, images, masks, path):
    """Rows: input, ground truth, prediction overlaid on the input (scores
    `> 0.5`, the first class in red, a second in blue), and, for models
    with a decoder (SegCaps), the reconstruction from the predicted
    object's capsules; one column per image."""
    images = np.asarray(images, dtype="float32")
    masks = np.asarray(masks, dtype="float32")
    decoder = getattr(model, "decoder", None) is not None

    def forward(x):
        if not decoder:
            return model(x, training=False), None
        scores, poses = model(x, training=False, return_poses=True)
        return scores, model.decode(poses, ops.cast(scores > 0.5, poses.dtype))

    if keras.backend.backend() == "jax":
        import jax  # eager JAX would compile each of SegCaps's many ops

        forward = jax.jit(forward)
    scores, decoded = forward(ops.convert_to_tensor(images))
    scores = np.asarray(ops.convert_to_numpy(scores), dtype="float32")
    decoded = None if decoded is None else ops.convert_to_numpy(decoded)
    rows = ["input", "ground truth", "prediction", *(["reconstruction"] if decoder else [])]
    fig, axes = plt.subplots(
        len(rows),
        len(images),
        figsize=(max(1.5 * len(images), 6.0), 1.6 * len(rows)),
        squeeze=False,
    )
    for k in range(len(images)):
        gray = images[k].mean(axis=-1, keepdims=True) if images.shape[-1] != 3 else images[k]
        base = np.repeat(gray, 3, axis=-1) if gray.shape[-1] == 1 else gray
        _show(axes[0, k], images[k])
        _show(axes[1, k], masks[k].max(axis=-1, keepdims=True))
        overlay = base.copy()
        for c, color in zip(range(scores.shape[-1]), ([1.0, 0.0, 0.0], [0.0, 0.3, 1.0])):
            hit = scores[k, ..., c] > 0.5
            overlay[hit] = 0.5 * overlay[hit] + 0.5 * np.array(color)
        _show(axes[2, k], overlay)
        if decoder:
            _show(axes[3, k], decoded[k])
    for row, title in enumerate(rows):
        axes[row, 0].set_ylabel(title, fontsize=8)
    fig.tight_layout()
    atomic.save_figure(fig, path, dpi=100)
    plt.close(fig)
