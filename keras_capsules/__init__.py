"""keras-capsules: capsule networks and routing algorithms for Keras 3.

Layers and routers are written with `keras.ops` only and run unchanged on
TensorFlow, PyTorch and JAX.
"""

__version__ = "0.1.0"

from keras_capsules import layers, losses, ops, routing
from keras_capsules.layers import Capsule, Length, Mask, PrimaryCapsule
from keras_capsules.losses import MarginLoss
from keras_capsules.ops import efficient_squash, safe_norm, squash
from keras_capsules.routing import DynamicRouting, Router, SelfAttentionRouting
from keras_capsules.routing import EMRouting
from keras_capsules.layers import ConvCapsule1D, ConvCapsule2D
from keras_capsules.layers import ClassMatrixCapsule, ConvMatrixCapsule, PrimaryMatrixCapsule
from keras_capsules import callbacks
from keras_capsules.losses import SpreadLoss
