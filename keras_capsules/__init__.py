"""keras-capsules: capsule networks and routing algorithms for Keras 3.

Layers and routers are written with `keras.ops` only and run unchanged on
TensorFlow, PyTorch and JAX.
"""

__version__ = "0.1.0"

from keras_capsules import layers, losses, models, ops, routing
from keras_capsules.layers import (
    Capsule,
    CapsuleAttention,
    CapsulePruning,
    Length,
    Mask,
    PrimaryCapsule,
)
from keras_capsules.losses import MarginLoss
from keras_capsules.models import CapsNet, EfficientCapsNet
from keras_capsules.ops import efficient_squash, safe_norm, sparsemax, squash
from keras_capsules.routing import (
    DynamicRouting,
    InvertedDotProductRouting,
    Router,
    SelfAttentionRouting,
    SelfRouting,
    SparseAttentionRouting,
)
