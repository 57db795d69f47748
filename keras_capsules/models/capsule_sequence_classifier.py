"""Capsule heads on sequence backbones: the hidden states of a transformer
(or any Keras model giving `(batch, n, dim)`) routed to class capsules."""

import importlib

import keras
from keras import ops

from keras_capsules.layers.vector_routing import VectorRouting
from keras_capsules.models import presets
from keras_capsules.models.capsule_task import CapsuleTask, model_inputs, sample_shape
from keras_capsules.validation import boolean, positive_int

_HIDDEN_STATES = ("all", "last")


def _keras_hub():
    try:
        return importlib.import_module("keras_hub")
    except ImportError as error:
        raise ImportError(
            "Preset names need keras-hub: `pip install keras-hub` (in a checkout "
            'of keras-capsules: `pip install -e ".[hub]"`).'
        ) from error


def _sequence_output(backbone):
    output = backbone.output
    if isinstance(output, dict):
        if "sequence_output" not in output:
            raise ValueError(
                "`backbone` gives a dict without a 'sequence_output'. Received: "
                f"outputs {sorted(output)}"
            )
        return output["sequence_output"]
    return output


def _hidden_state_tensors(backbone, hidden_states):
    if hidden_states == "last":
        return [_sequence_output(backbone)]
    if hidden_states == "all":
        layers = getattr(backbone, "transformer_layers", None)
        if not layers:
            raise ValueError(
                "`hidden_states='all'` needs a backbone with `transformer_layers` "
                "(keras-hub's BERT, RoBERTa, DistilBERT, ...); pass 'last' or a list "
                "of layer names. Received: hidden_states='all' for a backbone of "
                f"class {type(backbone).__name__}"
            )
        return [layer.output for layer in layers]
    names = list(hidden_states)
    if not names or not all(isinstance(name, str) for name in names):
        raise ValueError(
            "`hidden_states` must be 'all', 'last' or a non-empty list of layer "
            f"names of the backbone. Received: hidden_states={hidden_states!r}"
        )
    known = {layer.name for layer in backbone.layers}
    missing = [name for name in names if name not in known]
    if missing:
        raise ValueError(
            f"`hidden_states` names layers the backbone does not have: {missing}. "
            f"Received: hidden_states={names}"
        )
    return [backbone.get_layer(name).output for name in names]


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsuleSequenceClassifier(CapsuleTask):
    """Routes a backbone's hidden states to class capsules (Heinsen, 2022).

    The hidden states of `L` layers of the backbone, each `(batch, n,
    dim)`, are stacked, marked with a learned embedding of their depth,
    projected to parts, routed to `num_parts` part capsules and from
    those to one capsule per class, each read out as a logit by one
    shared linear map:

    ```
    h[b, t, l]  = hidden_l[b, t] + depth[l]                  (batch, n, L, dim)
    x           = LayerNorm(swish(h @ W + c))               (batch, n L, hidden_dim)
    parts       = VectorRouting(num_parts, part_dim)(x, mask)
    classes     = VectorRouting(num_classes, capsule_dim)(parts)
    logits[b,k] = classes[b, k] . w + w0
    ```

    `VectorRouting` never forms the votes, so memory grows linearly in
    `n L`: every depth of a long sequence can be routed, as in the paper
    (all 24 layers of RoBERTa-large or BEiT-large).

    The padding mask: a backbone whose inputs hold `"padding_mask"`
    (keras-hub's text backbones) has it honoured at every depth; padded
    tokens take no part, and a padded batch gives the logits of the
    unpadded sequences.

    The backbone is saved inside the `.keras` file (config and weights)
    and trained with the head; freeze it with
    `model.backbone.trainable = False` before `compile`.

    The task contract of every ready model (`CapsuleTask`):
    `compile(optimizer="auto", loss="auto", metrics="auto")` gives Adam at
    `5e-5` when it fine-tunes pretrained weights (`pretrained=True` and the
    backbone trainable), `1e-3` otherwise (a frozen backbone, or one
    trained from scratch with the head),
    `CategoricalCrossentropy(from_logits=True)` and accuracy; labels are
    class ids `(batch,)` or `(batch, 1)`, or one-hot; `return_poses=True`
    also gives the class capsules `(batch, num_classes, capsule_dim)`; a
    saved model comes back compiled and resumes training on any backend.

    Args:
        backbone: a functional `keras.Model` (a keras-hub `Backbone` such as
            `BertBackbone`, `RobertaBackbone`, `ViTBackbone`, or your own)
            whose output is `(batch, n, dim)` or a dict with
            `"sequence_output"`.
        num_classes: number of classes, `>= 2`.
        hidden_states: `"all"`: the output of every layer in the backbone's
            `transformer_layers` (keras-hub's text backbones), as the paper
            routes them; `"last"`: the sequence output only; or a list of
            layer names of the backbone, whose outputs share one shape.
        hidden_dim: size of the projected inputs of the first routing.
        num_parts: part capsules (outputs of the first routing).
        part_dim: size of a part capsule.
        capsule_dim: size of a class capsule.
        iterations: routing iterations of both routings, `>= 1`.
        pretrained: whether the backbone holds pretrained weights, which
            `compile()` then fine-tunes at `5e-5` while it is trainable
            (`1e-3` for a backbone trained from scratch). `from_preset`
            sets it when it loads a preset's weights; pass `True` for a
            pretrained backbone made otherwise
            (`CapsuleSequenceClassifier(BertBackbone.from_preset(...), 2,
            pretrained=True)`).
        **kwargs: `keras.Model` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: the backbone's inputs (for keras-hub text backbones a dict
            of `token_ids`, `padding_mask` and, for BERT, `segment_ids`).
        training: whether the layers run in training mode.
        return_poses: also return the class capsules.

    Returns:
        logits `(batch, num_classes)`; with `return_poses=True`, `(logits,
        class capsules)`.

    Example:

    >>> import keras_hub
    >>> backbone = keras_hub.models.BertBackbone(
    ...     vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=8)
    >>> model = keras_capsules.models.CapsuleSequenceClassifier(backbone, 3)
    >>> inputs = {"token_ids": np.ones((2, 8), "int32"),
    ...           "segment_ids": np.zeros((2, 8), "int32"),
    ...           "padding_mask": np.ones((2, 8), "int32")}
    >>> tuple(model(inputs).shape)
    (2, 3)

    With keras-hub installed, `CapsuleSequenceClassifier.from_preset(
    "bert_base_en_uncased", num_classes=2)` starts from a pretrained
    backbone; a saved `.keras` file loads with `from_preset(path)` too.

    Reference: Heinsen, "An Algorithm for Routing Vectors in Sequences",
    arXiv:2211.11754, 2022 (routing every depth of a frozen transformer).
    """

    min_classes = 2

    def __init__(
        self,
        backbone,
        num_classes,
        hidden_states="all",
        hidden_dim=256,
        num_parts=32,
        part_dim=64,
        capsule_dim=16,
        iterations=2,
        pretrained=False,
        **kwargs,
    ):
        # The inputs are the backbone's (a dict for keras-hub's text
        # backbones): not one shape to check.
        super().__init__(input_shape=None, num_classes=num_classes, **kwargs)
        if isinstance(backbone, dict):  # from a config
            module = backbone.get("module") or ""
            if module.startswith("keras_hub"):
                _keras_hub()  # registers keras-hub's classes
            backbone = keras.saving.deserialize_keras_object(backbone)
        if not isinstance(backbone, keras.Model) or not hasattr(backbone, "inputs"):
            raise ValueError(
                "`backbone` must be a functional keras.Model (a keras-hub Backbone "
                f"or your own). Received: backbone={backbone!r}"
            )
        self.backbone = backbone
        # The backbone's inputs, checked before a step and a call: one
        # shape, or a dict of shapes for keras-hub's text backbones.
        inputs = backbone.input
        if isinstance(inputs, dict):
            self.sample_shape = sample_shape({k: tuple(t.shape[1:]) for k, t in inputs.items()})
        elif not isinstance(inputs, (list, tuple)):
            self.sample_shape = sample_shape(tuple(inputs.shape[1:]))
        if isinstance(hidden_states, str) and hidden_states not in _HIDDEN_STATES:
            raise ValueError(
                "`hidden_states` must be 'all', 'last' or a list of layer names. "
                f"Received: hidden_states={hidden_states!r}"
            )
        tensors = _hidden_state_tensors(backbone, hidden_states)
        shapes = {tuple(t.shape[1:]) for t in tensors}
        if len(shapes) != 1 or len(tensors[0].shape) != 3:
            raise ValueError(
                "The hidden states to route must all be `(batch, n, dim)` of one "
                f"shape. Received: hidden_states={hidden_states!r} with shapes "
                f"{[tuple(t.shape) for t in tensors]}"
            )
        self.hidden_states = (
            hidden_states if isinstance(hidden_states, str) else list(hidden_states)
        )
        self.hidden_dim = positive_int(hidden_dim, "hidden_dim")
        self.num_parts = positive_int(num_parts, "num_parts")
        self.part_dim = positive_int(part_dim, "part_dim")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.iterations = positive_int(iterations, "iterations")
        self.pretrained = boolean(pretrained, "pretrained")
        self.depth = len(tensors)
        self.uses_padding_mask = isinstance(backbone.input, dict) and "padding_mask" in (
            backbone.input
        )

        # The backbone's own graph up to the chosen layers: it shares the
        # backbone's layers (and weights).
        self.hidden_state_model = keras.Model(backbone.input, tensors, name="hidden_states")
        dtype = self.dtype_policy
        dim = tensors[0].shape[-1]
        self.depth_embedding = keras.layers.Embedding(
            self.depth, dim, embeddings_initializer="zeros",
            dtype=dtype, name="depth_embedding",
        )  # fmt: skip
        self.part_projection = keras.layers.Dense(
            self.hidden_dim, activation="swish", kernel_initializer="he_normal",
            dtype=dtype, name="part_projection",
        )  # fmt: skip
        self.part_norm = keras.layers.LayerNormalization(dtype=dtype, name="part_norm")
        self.part_routing = VectorRouting(
            self.num_parts, self.part_dim, iterations=self.iterations, dtype=dtype,
            name="part_routing",
        )  # fmt: skip
        self.class_routing = VectorRouting(
            self.num_classes, self.capsule_dim, iterations=self.iterations,
            num_inputs=self.num_parts, dtype=dtype, name="class_routing",
        )  # fmt: skip
        self.readout = keras.layers.Dense(1, dtype=dtype, name="readout")
        # Built here, from the shapes: a symbolic call would not build them on
        # every backend, and a loaded model needs its variables before its
        # weights are read.
        self.depth_embedding.build((self.depth,))
        self.part_projection.build((None, None, self.depth, dim))
        self.part_norm.build((None, None, self.depth, self.hidden_dim))
        self.part_routing.build((None, None, self.hidden_dim))
        self.class_routing.build((None, self.num_parts, self.part_dim))
        self.readout.build((None, self.num_classes, self.capsule_dim))
        self.built = True

    def check_inputs(self, x, name="x"):
        """`CapsuleTask.check_inputs`, and sequences no longer than the
        backbone's `max_sequence_length` (its position embedding's size)."""
        super().check_inputs(x, name)
        limit = getattr(self.backbone, "max_sequence_length", None)
        x = model_inputs(x)
        tokens = x.get("token_ids") if isinstance(x, dict) else None
        shape = getattr(tokens, "shape", None)
        if not isinstance(limit, int) or shape is None or len(shape) < 2:
            return
        length = shape[1]
        if isinstance(length, int) and length > limit:
            raise ValueError(
                f"{type(self).__name__}'s backbone takes sequences of at most "
                f"{limit} tokens (its max_sequence_length). "
                f"Received: {name}['token_ids'].shape={tuple(shape)}"
            )

    def scores_and_poses(self, inputs, training=None):
        self.check_inputs(inputs, "inputs")
        hidden = self.hidden_state_model(inputs, training=training)
        hidden = hidden if isinstance(hidden, (list, tuple)) else [hidden]
        # The backbone keeps its own dtype policy; the head computes in its own.
        x = ops.cast(ops.stack(hidden, axis=2), self.compute_dtype)  # (batch, n, depth, dim)
        x = x + self.depth_embedding(ops.arange(self.depth))
        x = self.part_norm(self.part_projection(x))
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length * self.depth, self.hidden_dim))
        mask = None
        if self.uses_padding_mask:
            keep = ops.cast(inputs["padding_mask"], "bool")[:, :, None]
            mask = ops.reshape(
                ops.broadcast_to(keep, (batch, length, self.depth)), (batch, length * self.depth)
            )
        parts = self.part_routing(x, mask=mask)
        classes = self.class_routing(parts)
        return ops.squeeze(self.readout(classes), axis=-1), classes

    def compute_output_shape(self, input_shape):
        if isinstance(input_shape, dict):
            input_shape = next(iter(input_shape.values()))
        return (input_shape[0], self.num_classes)

    @property
    def default_learning_rate(self):
        """Adam's learning rate of `compile()`: 5e-5 (fine-tuning) for a
        trainable pretrained backbone; 1e-3 for a frozen one or one trained
        from scratch."""
        return 5e-5 if self.pretrained and self.backbone.trainable else 1e-3

    def default_loss(self):
        """Cross-entropy on the logits."""
        return keras.losses.CategoricalCrossentropy(from_logits=True)

    @classmethod
    def from_preset(cls, preset, num_classes=None, load_weights=True, **kwargs):
        """A saved classifier (a `.keras` file, as every ready model's
        `from_preset`), or a new classifier of `num_classes` on
        `keras_hub.models.Backbone.from_preset(preset)`: a preset name
        (downloaded by keras-hub) or a local preset folder, `pretrained`
        when its weights are loaded (`load_weights=True`)."""
        if presets.is_capsules_preset(preset):
            return presets.from_preset(preset, model_class=cls)
        if num_classes is None:
            raise ValueError(
                "`num_classes` is needed for a new classifier on a keras-hub backbone "
                f"preset. Received: preset={preset!r}, num_classes=None"
            )
        backbone = _keras_hub().models.Backbone.from_preset(preset, load_weights=load_weights)
        kwargs.setdefault("pretrained", bool(load_weights))
        return cls(backbone, num_classes, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(
            backbone=keras.saving.serialize_keras_object(self.backbone),
            num_classes=self.num_classes,
            hidden_states=self.hidden_states,
            hidden_dim=self.hidden_dim,
            num_parts=self.num_parts,
            part_dim=self.part_dim,
            capsule_dim=self.capsule_dim,
            iterations=self.iterations,
            pretrained=self.pretrained,
        )
        return config

    @classmethod
    def from_config(cls, config):
        # Files saved before `pretrained` existed fine-tuned any trainable
        # backbone at 5e-5: they keep doing so when compiled again.
        return cls(**{"pretrained": True, **config})
