"""Looking inside a trained capsule network: the routing coefficients of
every routed layer, measures of its activations and routing, and a figure
of the coefficients.

A routed layer gives its coefficients when called with
`return_coefficients=True`, but a trained or loaded model was built
without them, and calling its layers again on their recorded inputs fails
in Keras (`Output ... is not connected to inputs`). `routing_coefficients`
rebuilds the model's graph on the same layers (the same weights, nothing
copied), with every routed layer called with `return_coefficients=True`,
and runs it: one forward pass, no change to the model.
"""

import keras
import numpy as np

from keras_capsules import capsule_measures as measures
from keras_capsules.layers.base_routed_capsule import RoutedCapsule
from keras_capsules.layers.vector_routing import VectorRouting
from keras_capsules.validation import boolean

# The layers that take `return_coefficients=True` and then return
# `(outputs, coefficients)`.
ROUTED_LAYERS = (RoutedCapsule, VectorRouting)
# The activation quantiles of `capsule_statistics`.
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def routing_coefficients(model, inputs, batch_size=32):
    """The routing coefficients of every routed layer of a model, by layer name.

    For a functional or `Sequential` model (routed layers inside nested
    functional models included), each routed layer (`Capsule`,
    `ConvCapsule2D`, `ClassMatrixCapsule`, `QuaternionCapsule`,
    `VectorRouting`, ...) is called as in the model but with
    `return_coefficients=True`; Keras masks flow as in the model. For a
    ready classifier (`CapsNet`, `EfficientCapsNet`, ...: a model with a
    `routing_coefficients(inputs)` method) its class capsules' coefficients
    come from that method.

    The coefficients' shape is each layer's, as its docstring gives it:
    `(batch, in_caps, out_caps)` for `Capsule` (for a child `i`, how it
    splits its vote over the parents `j`), `(batch, n, num_capsules)` for
    `VectorRouting` (each input's credit), per window for the windowed
    layers.

    Args:
        model: a built `keras.Model`.
        inputs: the model's inputs (arrays, as for `predict`).
        batch_size: the batch size of the forward pass.

    Returns:
        a dict `{layer name: NumPy array}` in the order of the layers.

    Raises:
        ValueError: for a subclassed model without `routing_coefficients`,
            or a model without a routed layer.

    Example:

    >>> inputs = keras.Input((6, 4))
    >>> poses = keras_capsules.layers.Capsule(3, 5, name="classes")(inputs)
    >>> model = keras.Model(inputs, keras_capsules.layers.Length()(poses))
    >>> x = np.random.default_rng(0).normal(size=(2, 6, 4))
    >>> c = keras_capsules.diagnostics.routing_coefficients(model, x)
    >>> list(c), c["classes"].shape, np.allclose(c["classes"].sum(-1), 1, atol=1e-5)
    (['classes'], (2, 6, 3), True)
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"`model` must be a keras.Model. Received: model={model!r}")
    graph = _graph(model)
    if graph is None:
        if callable(getattr(model, "routing_coefficients", None)):
            layer = getattr(model, "class_capsules", None)
            name = layer.name if layer is not None else "class_capsules"
            coefficients = model.routing_coefficients(np.asarray(inputs))
            return {name: keras.ops.convert_to_numpy(coefficients)}
        raise ValueError(
            "`routing_coefficients` reads functional and Sequential models (built), "
            "and ready models with a `routing_coefficients` method. In a subclassed "
            "model, call the routed layer with `return_coefficients=True` in a "
            f"method of your own. Received: model of class {type(model).__name__}"
        )
    probe_inputs, _, coefficients, _ = _outputs_and_coefficients(graph)
    _check_routed(graph, coefficients)
    probe = keras.Model(probe_inputs, coefficients)
    values = probe.predict(inputs, batch_size=batch_size, verbose=0)
    return {name: values[name] for name in coefficients}  # in the layers' order


def coefficient_model(model):
    """A functional model on the same layers that returns the routing
    coefficients of every routed layer: `{layer name: coefficients}`.

    The layers are the model's own (shared weights): training or loading
    weights into the model changes what this one gives.

    Args:
        model: a functional or built `Sequential` model.

    Returns:
        a `keras.Model` with the model's inputs and a dict of outputs, to
        call or `predict` on a batch.
    """
    graph = _graph(model)
    if graph is None:
        raise ValueError(
            "`model` must be a functional or a built Sequential model. "
            f"Received: model of class {type(model).__name__}"
        )
    inputs, _, coefficients, _ = _outputs_and_coefficients(graph)
    _check_routed(graph, coefficients)
    return keras.Model(inputs, coefficients, name=f"{model.name}_coefficients")


def _check_routed(model, coefficients):
    if not coefficients:
        raise ValueError(
            "`model` has no routed layer (a layer that takes "
            f"`return_coefficients=True`). Received: model={model.name!r} with layers "
            f"{[layer.name for layer in model.layers]}"
        )


def _outputs_and_coefficients(model, back=0):
    """`(inputs, outputs, {name: coefficients}, {name: (layer, outputs)})`
    of the model's graph made again on its own layers, each routed layer
    (also inside nested functional and Sequential models) giving its
    coefficients, and its outputs beside them. With `back=1`, the
    coefficients are those of each iterating router stopped one iteration
    early, on the inputs the model gives it (the layers below run their
    full iterations; the others' coefficients are as they are)."""
    found, routed = {}, {}

    def call(layer, *args, **kwargs):
        if isinstance(layer, ROUTED_LAYERS):
            outputs, coefficients = _WithCoefficients(layer)(*args, **kwargs)
            fewer = _fewer_iterations(layer, back)
            if fewer is not None:  # only the coefficients: the outputs go on in full
                coefficients = _WithCoefficients(layer, fewer)(*args, **kwargs)[1]
            name = _add(found, layer.name, coefficients)
            routed[name] = (layer, outputs)
            return outputs
        if isinstance(layer, keras.Model) and _graph(layer) is not None:
            inner_inputs, inner_outputs, inner, inner_routed = _outputs_and_coefficients(
                _graph(layer), back
            )
            if inner:
                layer_outputs = {k: v for k, (_, v) in inner_routed.items()}
                nested = keras.Model(
                    inner_inputs, [inner_outputs, inner, layer_outputs], name=layer.name
                )
                outputs, coefficients, routed_outputs = nested(*args, **kwargs)
                for key, tensor in coefficients.items():
                    name = _add(found, f"{layer.name}/{key}", tensor)
                    routed[name] = (inner_routed[key][0], routed_outputs[key])
                return outputs
        return layer(*args, **kwargs)

    clone = keras.models.clone_model(model, clone_function=lambda layer: layer, call_function=call)
    return clone.inputs, clone.output, found, routed


def _add(found, name, tensor):
    name = name if name not in found else f"{name}_{len(found)}"
    found[name] = tensor
    return name


def capsule_statistics(
    model, inputs, labels=None, threshold=0.01, batch_size=32, iteration_change=False
):
    """Activation and routing measures of every routed layer of a model, in
    one forward pass (`keras_capsules.capsule_measures`).

    Per routed layer (by name, in the layers' order), a dict of floats:

    - `activation_mean` and `activation_quantiles` (5, 25, 50, 75, 95 %) of
      the parents' activations: a vector capsule's length, the
      activations of matrix and quaternion capsules, Heinsen's scores
      through a sigmoid; `starved_fraction`: the parents whose activation
      stays below `threshold` for the whole batch; `active_fraction`:
      (parent, input) pairs at or above it;
    - `coefficient_entropy` (0: each child routes to one parent, 1:
      evenly), `tree_fraction` (children sending more than half their vote
      to one parent), `coefficient_spread` (how much routing changes from
      input to input; 0: static);
    - `children_per_active_parent` and, with `labels`,
      `parent_consistency` (a child's strongest parent, the same across
      inputs of a class: 1);
    - `pose_length_mean` and `pose_length_std`;
    - with `iteration_change=True`, `coefficient_change`: how much the
      router's last iteration moved each child's coefficients (the
      total-variation distance to those of the iteration before; 0:
      converged), from a second forward pass in which each iterating
      router also runs one iteration short on the same inputs; NaN for
      routers that do not iterate (or run one iteration).

    `VectorRouting` has no activations (its outputs are normalised): its
    activation measures are NaN. For windowed layers the children of every
    window are pooled and the parents are the capsule types.

    Args:
        model: a functional or built `Sequential` model, or a ready
            classifier.
        inputs: a batch of the model's inputs (arrays).
        labels: optional class ids `(batch,)` (or one-hot), for
            `parent_consistency`.
        threshold: the activation below which a parent is inactive.
        batch_size: the batch size of the forward pass.
        iteration_change: bool, also measure `coefficient_change` (a
            second forward pass).

    A ready classifier (`CapsNet`, `EfficientCapsNet`,
    `CapsuleImageClassifier`, ...) gives its class capsules' row.

    Returns:
        `{layer name: {measure: float or list}}`.

    Example:

    >>> inputs = keras.Input((6, 4))
    >>> poses = keras_capsules.layers.Capsule(3, 5, name="classes")(inputs)
    >>> model = keras.Model(inputs, keras_capsules.layers.Length()(poses))
    >>> x = np.random.default_rng(0).normal(size=(8, 6, 4))
    >>> stats = keras_capsules.diagnostics.capsule_statistics(model, x)
    >>> 0 <= stats["classes"]["coefficient_entropy"] <= 1, stats["classes"]["starved_fraction"]
    (True, 0.0)

    Reference: Mitterreiter, Koch, Giesen & Laue, "Why Capsule Neural
    Networks Do Not Scale: Challenging the Dynamic Parse-Tree Assumption",
    AAAI 2023; Everett, Zhong & Leontidis, "Vanishing Activations: A
    Symptom of Deep Capsule Networks", 2023.
    """
    return StatisticsProbe(model, iteration_change)(inputs, labels, threshold, batch_size)


class StatisticsProbe:
    """`capsule_statistics` with its probe model made once, for measuring
    a model again and again (`callbacks.CapsuleMonitor`, every epoch).

    The probe shares the model's layers: each call measures the current
    weights.

    Args:
        model: a functional or built `Sequential` model, or a ready
            classifier.
        iteration_change: bool, also measure `coefficient_change` (as for
            `capsule_statistics`).

    Call arguments:
        inputs, labels, threshold, batch_size: as for `capsule_statistics`.
        coefficients: also return `{layer name: coefficients}`.

    Returns:
        a callable; what `capsule_statistics` gives, and with
        `coefficients=True` `(statistics, coefficients)`.

    Example:

    >>> model = keras.Sequential([keras.Input((6, 4)), keras_capsules.layers.Capsule(3, 5)])
    >>> probe = keras_capsules.diagnostics.StatisticsProbe(model)
    >>> stats, c = probe(np.ones((2, 6, 4)), coefficients=True)
    >>> [value.shape for value in c.values()]
    [(2, 6, 3)]
    """

    def __init__(self, model, iteration_change=False):
        graph = _graph(model)
        self.ready = None
        self.previous = None
        self.iteration_change = boolean(iteration_change, "iteration_change")
        if graph is None and _is_ready_classifier(model):
            # A ready classifier: its class capsules, on its child capsules.
            self.ready, self.probe = model, None
            self.layers = {model.class_capsules.name: model.class_capsules}
            return
        if graph is None:
            raise ValueError(
                "`capsule_statistics` reads functional and built Sequential models, "
                "and the ready classifiers' class capsules. "
                f"Received: model of class {type(model).__name__}"
            )
        probe_inputs, _, coefficients, routed = _outputs_and_coefficients(graph)
        _check_routed(graph, coefficients)
        outputs = {f"c|{name}": tensor for name, tensor in coefficients.items()}
        for name, (_, layer_outputs) in routed.items():
            for k, tensor in enumerate(keras.tree.flatten(layer_outputs)[:2]):
                outputs[f"o{k}|{name}"] = tensor
        self.probe = keras.Model(probe_inputs, outputs)
        self.layers = {name: layer for name, (layer, _) in routed.items()}
        if self.iteration_change:
            # The same graph, each iterating router's coefficients also
            # taken one iteration short (its outputs in full).
            previous_inputs, _, previous, _ = _outputs_and_coefficients(graph, back=1)
            self.previous = keras.Model(previous_inputs, previous)

    def __call__(self, inputs, labels=None, threshold=0.01, batch_size=32, coefficients=False):
        if self.ready is None:
            values = self.probe.predict(inputs, batch_size=batch_size, verbose=0)
            if self.previous is not None:
                previous = self.previous.predict(inputs, batch_size=batch_size, verbose=0)
                values.update({f"p|{name}": previous[name] for name in self.layers})
        else:
            values = self._ready_values(np.asarray(inputs), batch_size)
        if labels is not None:
            labels = np.asarray(labels)
            labels = labels.argmax(-1) if labels.ndim == 2 and labels.shape[-1] > 1 else labels
        stats = {
            name: _layer_statistics(layer, values, name, labels, threshold)
            for name, layer in self.layers.items()
        }
        if coefficients:
            return stats, {name: values[f"c|{name}"] for name in self.layers}
        return stats

    def _ready_values(self, inputs, batch_size):
        name, layer = next(iter(self.layers.items()))
        fewer = _fewer_iterations(layer) if self.iteration_change else None
        parts = []
        for start in range(0, len(inputs), batch_size):
            children = self.ready.child_capsules(inputs[start : start + batch_size], training=False)
            outputs, c = layer(children, return_coefficients=True)
            part = {f"c|{name}": c}
            for k, tensor in enumerate(keras.tree.flatten(outputs)[:2]):
                part[f"o{k}|{name}"] = tensor
            if self.iteration_change:  # the layer's own coefficients if it does not iterate
                short = c if fewer is None else _WithCoefficients(layer, fewer)(children)[1]
                part[f"p|{name}"] = short
            parts.append({k: keras.ops.convert_to_numpy(t) for k, t in part.items()})
        return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def _fewer_iterations(layer, back=1):
    """The router's iterations less `back`, or `None` for a router that
    does not iterate (or has no iteration before its last)."""
    iterations = getattr(getattr(layer, "router", None), "iterations", None)
    return iterations - back if back and iterations and iterations > back else None


def _is_ready_classifier(model):
    return callable(getattr(model, "child_capsules", None)) and isinstance(
        getattr(model, "class_capsules", None), ROUTED_LAYERS
    )


def _layer_statistics(layer, values, name, labels, threshold):
    c = values[f"c|{name}"]
    c = c.reshape(len(c), -1, c.shape[-1])  # windows' children pooled
    parents = c.shape[-1]
    poses = values[f"o0|{name}"]
    if isinstance(layer, VectorRouting):
        activations = None
        lengths = np.linalg.norm(poses.astype("float64"), axis=-1).reshape(len(poses), -1)
    elif getattr(layer, "length_coded", False):
        lengths = np.linalg.norm(poses.astype("float64"), axis=-1).reshape(len(poses), -1)
        activations = lengths
    else:
        activations = values[f"o1|{name}"].astype("float64").reshape(len(poses), -1)
        if getattr(layer, "router_activations", None) == "logits":
            activations = 1.0 / (1.0 + np.exp(-activations))
        lengths = np.linalg.norm(poses.astype("float64").reshape(*activations.shape, -1), axis=-1)
    stats = {
        "coefficient_entropy": measures.normalized_entropy(c),
        "tree_fraction": measures.tree_fraction(c),
        "coefficient_spread": measures.coefficient_spread(c),
        "pose_length_mean": float(lengths.mean()),
        "pose_length_std": float(lengths.std()),
        "parent_consistency": (
            measures.parent_consistency(c, labels) if labels is not None else float("nan")
        ),
    }
    if f"p|{name}" in values:  # iteration_change=True
        stats["coefficient_change"] = (
            measures.iteration_change(c, values[f"p|{name}"].reshape(c.shape))
            if _fewer_iterations(layer) is not None
            else float("nan")
        )
    nan = float("nan")
    if activations is None:
        stats.update(
            activation_mean=nan, activation_quantiles=[nan] * 5, starved_fraction=nan,
            active_fraction=nan, children_per_active_parent=nan,
        )  # fmt: skip
        return stats
    # A windowed layer's parents: the capsule types, each position its own.
    by_type = activations.reshape(len(activations), -1, parents)
    stats.update(
        activation_mean=float(activations.mean()),
        activation_quantiles=[float(q) for q in np.quantile(activations, QUANTILES)],
        starved_fraction=measures.starved_fraction(activations, threshold),
        active_fraction=float(np.mean(activations >= threshold)),
        children_per_active_parent=measures.children_per_active_parent(
            c, by_type.max(axis=1), threshold
        ),
    )
    return stats


def _graph(model):
    """The model as a functional graph (a `Sequential` as one), or `None`
    for a subclassed model."""
    if isinstance(model, keras.Sequential):
        return keras.Model(model.inputs, model.outputs) if model.built and model.inputs else None
    return model if getattr(model, "inputs", None) and getattr(model, "outputs", None) else None


class _WithCoefficients(keras.layers.Layer):
    """A routed layer called with `return_coefficients=True`, as a layer of
    its own. Calling the routed layer itself would give it a node with two
    outputs after one with one, which Keras 3.15's functional graph check
    counts by the first (`Output ... is not connected to inputs`)."""

    def __init__(self, layer, iterations=None, **kwargs):
        suffix = "with_coefficients" if iterations is None else f"coefficients_at_{iterations}"
        super().__init__(name=f"{layer.name}_{suffix}", dtype=layer.dtype_policy, **kwargs)
        self.layer = layer
        # With `iterations`, the router runs that many (one fewer than the
        # layer's: the coefficients of the iteration before the last).
        self.iterations = iterations
        self.supports_masking = True

    def call(self, *args, **kwargs):
        if self.iterations is None:
            return self.layer(*args, return_coefficients=True, **kwargs)
        router, saved = self.layer.router, self.layer.router.iterations
        router.iterations = self.iterations
        try:
            return self.layer(*args, return_coefficients=True, **kwargs)
        finally:
            router.iterations = saved

    def compute_output_spec(self, *args, **kwargs):
        return self.layer.compute_output_spec(*args, return_coefficients=True, **kwargs)

    def compute_mask(self, *args, **kwargs):
        return None


def routing_figure(coefficients, child_types=None, parent_names=None, title=None):
    """A heat map of routing coefficients averaged over a batch: how much of
    its vote each child (or child type) sends to each parent.

    Args:
        coefficients: `(batch, children, parents)`, e.g. one entry of
            `routing_coefficients`, or of `model.routing_coefficients(x)`.
        child_types: capsule types per position (32 for CapsNet's primary
            capsules): the rows are then the types, averaged over positions.
        parent_names: names of the parents (class names), for the columns.
        title: the figure's title (default: the batch size).

    Returns:
        a `matplotlib.figure.Figure` (save it with `fig.savefig(path)`).

    Requires matplotlib (`pip install matplotlib`).

    Example:

    >>> c = np.full((4, 6, 3), 1 / 3, "float32")
    >>> fig = keras_capsules.diagnostics.routing_figure(c, parent_names=list("abc"))
    >>> fig.axes[0].get_xlabel()
    'parent capsule'
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as error:  # an optional dependency
        raise ImportError(
            "routing_figure draws with matplotlib: `pip install matplotlib`."
        ) from error
    coefficients = np.asarray(coefficients, dtype="float32")
    if coefficients.ndim != 3:
        raise ValueError(
            "`coefficients` must be (batch, children, parents). "
            f"Received: coefficients.shape={coefficients.shape}"
        )
    mean = coefficients.mean(axis=0)
    children, parents = mean.shape
    if child_types:
        if children % child_types:
            raise ValueError(
                f"`child_types` must divide the number of children ({children}). "
                f"Received: child_types={child_types!r}"
            )
        mean = mean.reshape(-1, child_types, parents).mean(axis=0)
    names = [str(n) for n in parent_names] if parent_names is not None else None
    if names is not None and len(names) != parents:
        raise ValueError(
            f"`parent_names` must name the {parents} parents. Received: {len(names)} names"
        )
    rows = mean.shape[0]
    figure = Figure(figsize=(max(6.0, 0.5 * parents + 2), min(max(3.0, rows * 0.18), 12.0)))
    ax = figure.add_subplot()
    image = ax.imshow(mean, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xticks(range(parents), names if names is not None else range(parents))
    ax.set_xlabel("parent capsule")
    ax.set_ylabel("child capsule type" if child_types else "child capsule")
    ax.set_title(title or f"Mean routing coefficients over {len(coefficients)} inputs")
    figure.colorbar(image, ax=ax, label="coefficient (child to parent)")
    figure.tight_layout()
    return figure
