"""Capsule layers."""

from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.length import Length
from keras_capsules.layers.mask import Mask
from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.layers.conv_capsule import ConvCapsule1D, ConvCapsule2D
from keras_capsules.layers.matrix_capsule import (
    ClassMatrixCapsule,
    ConvMatrixCapsule,
    PrimaryMatrixCapsule,
)
