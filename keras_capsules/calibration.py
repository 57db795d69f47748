"""Data-dependent initialisation of deep capsule networks: each routed
layer's transforms rescaled, layer by layer, so that its capsules start at
the squash's knee on real inputs.

The default transforms (`keras_capsules.initializers`) are derived for
children whose votes add up like independent random vectors. Real
children are not independent: the primary capsules of an image share
their features, so their votes add up coherently and a hidden layer of 16
capsules routed from 288 primary capsules starts at length ~0.93 instead
of 0.5. Each layer above receives saturated children and starts
saturated in turn, and a stack of two or more routed layers stays at
chance (docs/results.md, "Depth"). Measuring the lengths on a batch and
rescaling the transforms, the way LSUV initialisation (Mishkin & Matas,
"All you need is a good init", ICLR 2016) rescales a network's weights
layer by layer, starts every layer at the knee whatever its depth.
"""

import math

import keras
import numpy as np

from keras_capsules.diagnostics import _graph, _outputs_and_coefficients
from keras_capsules.initializers import INPUT_LENGTH
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.conv_capsule import ConvCapsule
from keras_capsules.layers.local_capsule_base import LocalCapsuleBase
from keras_capsules.validation import finite_float, positive_float, positive_int

# The search for a layer's scale: at most this many forward passes up to the
# layer after the first, each moving the scale by at most a factor of 16.
MAX_STEPS = 24
MAX_STEP = math.log(16.0)


def calibrate(model, inputs, target_length=INPUT_LENGTH, tolerance=0.02, batch_size=64):
    """Rescale every routed layer's transforms so its capsules start at `target_length`.

    For each vector capsule layer with transforms of a functional or
    `Sequential` model (`Capsule`, `ConvCapsule1D`, `ConvCapsule2D`,
    `ConvCapsule3D`, `LocalCapsule2D`, `LocalDeconvCapsule2D`; nested
    functional models included), in the order of the model's layers, the
    transforms `kernel` are multiplied by
    the factor `f > 0` at which the mean length of the layer's output
    poses on `inputs` is `target_length`:

    ```
    mean over samples and capsules of |poses(f * W)| = target_length
    ```

    found by secant steps on `log f` (bisection once the target is
    bracketed, where a step would leave the bracket), one forward pass up
    to the layer per step, the layers below already rescaled. A pose
    length grows with the scale of the votes for every router, so the
    search converges; where the target cannot be reached
    (a router whose lengths saturate), the closest scale is kept and its
    length returned. Call it once on a built model before training (a few
    hundred training samples are enough); the weights change, nothing
    else does, so the model trains, saves and loads as before.

    Left as they are: orthogonal transforms (`orthogonal=True`, which keep
    the children's lengths), and the layers whose poses are not vectors
    measured by their length (matrix, quaternion and Heinsen capsules,
    `VectorRouting`).

    Use it for networks with more than one routed layer: with the default
    transforms, a hidden layer's capsules start saturated and a stack of
    two or more routed layers stays at chance on MNIST; calibrated, five
    routed layers train (docs/results.md, "Depth").

    Args:
        model: a built functional or `Sequential` `keras.Model`.
        inputs: the model's inputs (arrays, as for `predict`): a batch of
            training samples.
        target_length: float in (0, 1), the mean pose length each layer
            starts at; default 0.5, the squash's knee, the length the
            default transforms assume for their children.
        tolerance: float > 0, how close to `target_length` is enough.
        batch_size: the batch size of the forward passes.

    Returns:
        a dict `{layer name: {"scale": f, "length_before": float,
        "length": float}}`, in the order of the layers.

    Raises:
        ValueError: for a bad argument, a subclassed model, or a model
            without a layer to calibrate.

    Example:

    >>> images = keras.Input((12, 12, 1))
    >>> x = keras.layers.Conv2D(8, 3, activation="relu")(images)
    >>> x = keras_capsules.PrimaryCapsule(4, 8, 3, strides=2)(x)
    >>> x = keras_capsules.Capsule(8, 8, name="hidden")(x)
    >>> x = keras_capsules.Capsule(3, 8, name="classes")(x)
    >>> model = keras.Model(images, keras_capsules.Length()(x))
    >>> x = np.random.default_rng(0).uniform(size=(32, 12, 12, 1))
    >>> report = keras_capsules.calibration.calibrate(model, x)
    >>> [round(r["length"], 1) for r in report.values()]
    [0.5, 0.5]

    Reference: Mishkin & Matas, "All you need is a good init", ICLR 2016
    (layer-sequential unit-variance initialisation).
    """
    target_length = finite_float(target_length, "target_length", 0.0, 1.0, high_inclusive=False)
    tolerance = positive_float(tolerance, "tolerance")
    batch_size = positive_int(batch_size, "batch_size")
    if not isinstance(model, keras.Model):
        raise ValueError(f"`model` must be a keras.Model. Received: model={model!r}")
    graph = _graph(model)
    if graph is None:
        raise ValueError(
            "`calibrate` rescales the layers of functional and Sequential models (built). "
            "In a subclassed model, build the same layers in a functional model, or pass "
            f"`kernel_initializer`. Received: model of class {type(model).__name__}"
        )
    probe_inputs, _, _, routed = _outputs_and_coefficients(graph)
    layers = {name: (layer, outputs) for name, (layer, outputs) in routed.items()
              if _has_scalable_transforms(layer)}  # fmt: skip
    if not layers:
        raise ValueError(
            "`model` has no capsule layer with transforms to calibrate (Capsule, "
            "ConvCapsule1D/2D/3D, LocalCapsule2D, LocalDeconvCapsule2D without "
            f"orthogonal=True). Received: model={model.name!r} with layers "
            f"{[layer.name for layer in model.layers]}"
        )
    report = {}
    for name, (layer, outputs) in layers.items():
        poses = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        probe = keras.Model(probe_inputs, poses)

        def mean_length(probe=probe):
            values = probe.predict(inputs, batch_size=batch_size, verbose=0)
            return float(np.mean(np.sqrt(np.sum(np.square(values.astype("float64")), -1))))

        report[name] = _search_scale(layer.kernel, mean_length, target_length, tolerance)
    return report


def _has_scalable_transforms(layer):
    """Vector capsules whose votes are linear in a `kernel`."""
    vector_layers = (Capsule, ConvCapsule, LocalCapsuleBase)
    return (
        isinstance(layer, vector_layers)
        and not getattr(layer, "orthogonal", False)
        and getattr(layer, "kernel", None) is not None
    )


def _search_scale(kernel, mean_length, target, tolerance):
    """Scales `kernel` by the `f` at which `mean_length()` is `target`.

    Secant steps on `log f` against `log(length / target)`, started with
    slope 1 (the squash's at its knee, and that of the routers whose pose
    length is linear in the votes), each step at most a factor of 16; once
    the target is bracketed, a step that leaves the bracket bisects it
    instead. Where the target is not reached, the closest scale is kept."""
    original = keras.ops.convert_to_numpy(kernel)

    def measure(log_scale):
        kernel.assign(keras.ops.cast(original * np.exp(log_scale), kernel.dtype))
        return mean_length()

    def error(length):
        return math.log(max(length, 1e-12) / target)

    before = measure(0.0)
    points = [(0.0, error(before))]
    best = (abs(before - target), 0.0, before)
    low = high = None  # log scales below and above the target
    for _ in range(MAX_STEPS):
        if best[0] <= tolerance:
            break
        x, y = points[-1]
        if y < 0:
            low = x if low is None else max(low, x)
        else:
            high = x if high is None else min(high, x)
        slope = 1.0
        if len(points) > 1 and points[-2][1] != y:
            slope = (y - points[-2][1]) / (x - points[-2][0])
        step = -y / slope if slope > 0 else -y
        step = max(-MAX_STEP, min(MAX_STEP, step))
        x_next = x + step
        if low is not None and high is not None and not low < x_next < high:
            x_next = (low + high) / 2
        length = measure(x_next)
        points.append((x_next, error(length)))
        best = min(best, (abs(length - target), x_next, length))
    _, log_scale, length = best
    kernel.assign(keras.ops.cast(original * np.exp(log_scale), kernel.dtype))
    return {"scale": math.exp(log_scale), "length_before": before, "length": length}
