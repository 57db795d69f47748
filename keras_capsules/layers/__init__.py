"""Capsule layers."""

from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.length import Length
from keras_capsules.layers.mask import Mask
from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.layers.strided_conv import StridedConv2D
from keras_capsules.layers.capsule_attention import CapsuleAttention
from keras_capsules.layers.capsule_pruning import CapsulePruning
from keras_capsules.layers.conv_capsule import ConvCapsule1D, ConvCapsule2D
from keras_capsules.layers.matrix_capsule import (
    ClassMatrixCapsule,
    ConvMatrixCapsule,
    PrimaryMatrixCapsule,
)
# Where it was before it joined the other math in `keras_capsules.ops`.
from keras_capsules.ops import householder_orthogonal
