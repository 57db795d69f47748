"""Matplotlib figures of the examples: training curves and capsule views."""

import matplotlib

matplotlib.use("Agg")  # Scripts run headless.
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402


def plot_history(history, path):
    """Loss and accuracy per epoch (and validation ones, when `history` has them)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key in zip(axes, ("loss", "accuracy")):
        for prefix, style in (("", "-o"), ("val_", "--o")):
            if prefix + key in history:
                values = history[prefix + key]
                ax.plot(range(1, len(values) + 1), values, style, label=prefix + key)
        ax.set_xlabel("epoch")
        ax.set_title(key)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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


def plot_reconstructions(model, images, labels, path):
    """Test images (top row) and their reconstructions from the longest
    capsule; returns the images' class-capsule poses."""
    # One batch shape for every model call here: eager JAX compiles each op
    # once per shape (a second shape doubled a CapsNet smoke run's figures).
    poses = ops.convert_to_numpy(model.encode(ops.convert_to_tensor(images), training=False))
    predictions = np.linalg.norm(poses, axis=-1).argmax(-1)  # the model's scores
    # `model.reconstruct(images)` without encoding the images a second time:
    # the longest capsule kept, the others zeroed, decoded.
    longest = np.eye(poses.shape[1], dtype=poses.dtype)[predictions][..., None]
    decoded = ops.convert_to_numpy(model.decode(poses * longest))
    fig, axes = plt.subplots(2, len(images), figsize=(1.5 * len(images), 3.4), squeeze=False)
    for k in range(len(images)):
        _show(axes[0, k], images[k])
        # One title per column: a title on the lower row overlaps the upper.
        axes[0, k].set_title(f"label {labels[k]}, pred {predictions[k]}", fontsize=8)
        _show(axes[1, k], decoded[k])
    fig.suptitle("Input (top) and reconstruction from the longest capsule (bottom)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return poses


def plot_perturbations(model, poses, path, steps=np.linspace(-0.25, 0.25, 11)):
    """Sabour et al. Fig. 4: tweak each dimension of the winning capsule, decode.

    `poses`: one image's class-capsule poses `(num_classes, dim)`. Row d
    shows the reconstruction when dimension d of the predicted class
    capsule is shifted by each value of `steps`, the other capsules zeroed.
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
    # One mosaic, one axes: 16 x 11 subplots took matplotlib ~3 s.
    height, width = decoded.shape[2:]
    mosaic = np.full((dims * (height + 1) - 1, len(steps) * (width + 1) - 1),
                     decoded.max(), dtype="float32")  # white gaps
    for d in range(dims):
        for s in range(len(steps)):
            mosaic[d * (height + 1):d * (height + 1) + height,
                   s * (width + 1):s * (width + 1) + width] = decoded[d, s]
    fig, ax = plt.subplots(figsize=(len(steps) * 0.8, dims * 0.8))
    if single_channel:
        ax.imshow(mosaic, cmap="gray", vmin=0, vmax=1)
    else:
        ax.imshow(mosaic, cmap="gray")
    ax.set_yticks([d * (height + 1) + height / 2 for d in range(dims)],
                  [f"dim {d}" for d in range(dims)], fontsize=6)
    ax.set_xticks([s * (width + 1) + width / 2 for s in range(len(steps))],
                  [f"{step:+.2f}" for step in steps], fontsize=6)
    ax.set_title(f"Perturbing each dimension of capsule {winner}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_routing(model, images, labels, path, child_types=None):
    """Mean coupling coefficients from child capsules to each class capsule.

    With `child_types` (capsule types per position, e.g. 32 for CapsNet)
    the children are averaged over positions, so rows are capsule types.
    Columns: classes; averaged over the images given.
    """
    coefficients = ops.convert_to_numpy(model.routing_coefficients(images)).astype("float32")
    mean = coefficients.mean(axis=0)
    if child_types:
        mean = mean.reshape(-1, child_types, mean.shape[-1]).mean(axis=0)
    fig, ax = plt.subplots(figsize=(6, max(3.0, mean.shape[0] * 0.18)))
    im = ax.imshow(mean, aspect="auto", cmap="viridis")
    ax.set_xlabel("class capsule")
    ax.set_ylabel("child capsule type" if child_types else "child capsule")
    ax.set_title(f"Mean routing coefficients over {len(images)} test images")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def capsule_figures(child_types=None):
    """The `figures` hook of the capsule examples: reconstructions,
    perturbations (models with a decoder) and routing heat map."""

    def figures(model, test, output_dir):
        import os

        images, labels = next(iter(test))
        images, labels = np.asarray(images)[:8], np.asarray(labels)[:8]
        if getattr(model, "reconstruction", False):
            poses = plot_reconstructions(model, images, labels,
                                         os.path.join(output_dir, "reconstructions.png"))
            plot_perturbations(model, poses[0], os.path.join(output_dir, "perturbations.png"))
        plot_routing(model, images, labels, os.path.join(output_dir, "routing.png"), child_types)

    return figures
