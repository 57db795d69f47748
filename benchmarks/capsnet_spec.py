"""The Sabour CapsNet that the pure-framework references implement.

Shared by `pure_torch_capsnet.py` and `pure_jax_capsnet.py` (which must not
import Keras: they are the baselines, measured in processes of their own):
the weight names and shapes, in Keras layouts (channels-last, `HWIO`
kernels, `(in, out)` dense kernels), a NumPy initialisation, and the
mapping from a `keras_capsules.models.CapsNet` to these weights (that one
imports Keras, lazily).

```
images (B, 28, 28, 1) -> conv 9x9, 256, relu -> (B, 20, 20, 256)
  -> primary conv 9x9 stride 2, 256 = 32 x 8 -> (B, 6, 6, 256)
  -> reshape (B, 1152, 8) -> squash
  -> votes[b, i, j] = u[b, i] @ W[i, j], W (1152, 10, 8, 16)
  -> 3 iterations of dynamic routing -> v (B, 10, 16); scores = |v|
loss = margin(scores, y) + 0.392 * mean((decoder(mask(v, y)) - images)^2)
decoder: 160 -> 512 relu -> 1024 relu -> 784 sigmoid
```
"""

import numpy as np

NUM_CLASSES = 10
PRIMARY_CAPS = 1152  # 6 * 6 * 32
ROUTING_ITERATIONS = 3
RECONSTRUCTION_WEIGHT = 0.392
EPSILON = 1e-7  # squash, safe_norm (Length) and Keras Adam all use 1e-7.
ADAM = dict(learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7)

SHAPES = {
    "conv_kernel": (9, 9, 1, 256),
    "conv_bias": (256,),
    "primary_kernel": (9, 9, 256, 256),
    "primary_bias": (256,),
    "capsule_kernel": (PRIMARY_CAPS, NUM_CLASSES, 8, 16),
    "dense1_kernel": (160, 512),
    "dense1_bias": (512,),
    "dense2_kernel": (512, 1024),
    "dense2_bias": (1024,),
    "dense3_kernel": (1024, 784),
    "dense3_bias": (784,),
}
NUM_PARAMS = 8_215_568


def count_params(weights):
    return int(sum(np.prod(w.shape) for w in weights.values()))


def init_weights(seed=0):
    """Glorot-uniform kernels (fans as Keras computes them), zero biases."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in SHAPES.items():
        if name.endswith("bias"):
            weights[name] = np.zeros(shape, "float32")
            continue
        receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
        fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        weights[name] = rng.uniform(-limit, limit, shape).astype("float32")
    return weights


def batches(batch_size, count=2, seed=0):
    """`count` fixed (images, integer labels) batches, images in [0, 1]."""
    rng = np.random.default_rng(seed)
    return [
        (
            rng.uniform(size=(batch_size, 28, 28, 1)).astype("float32"),
            rng.integers(0, NUM_CLASSES, size=(batch_size,)).astype("int32"),
        )
        for _ in range(count)
    ]


def keras_variables(model):
    """The variables of a `keras_capsules.models.CapsNet()`, named as `SHAPES`."""
    conv = model.features.get_layer("conv")
    primary = model.features.get_layer("primary")
    variables = [conv.kernel, conv.bias, primary.kernel, primary.bias, model.class_capsules.kernel]
    for layer in model.decoder.layers:
        if layer.weights:
            variables += [layer.kernel, layer.bias]
    return dict(zip(SHAPES, variables))


def keras_weights(model):
    """`keras_variables(model)` as NumPy arrays."""
    return {name: np.asarray(v) for name, v in keras_variables(model).items()}
