"""Capsule layers: primary capsules, routed capsule layers on one base
(`RoutedCapsule`), and the small layers around them."""

from keras_capsules.layers.auto_conv2d import AutoConv2D
from keras_capsules.layers.base_routed_capsule import RoutedCapsule
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.capsule_attention import CapsuleAttention
from keras_capsules.layers.capsule_pruning import CapsulePruning
from keras_capsules.layers.conv_capsule import ConvCapsule1D, ConvCapsule2D, ConvCapsule3D
from keras_capsules.layers.depthwise_primary_capsule import DepthwisePrimaryCapsule
from keras_capsules.layers.heinsen_capsule import HeinsenCapsule
from keras_capsules.layers.length import Length
from keras_capsules.layers.local_reference_frames import LocalReferenceFrames
from keras_capsules.layers.mask import Mask
from keras_capsules.layers.matrix_capsule import (
    ClassMatrixCapsule,
    ConvMatrixCapsule,
    PrimaryMatrixCapsule,
)
from keras_capsules.layers.point_primary_capsule import PointPrimaryCapsule
from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.layers.primary_capsule_1d import PrimaryCapsule1D
from keras_capsules.layers.primary_capsule_3d import PrimaryCapsule3D
from keras_capsules.layers.quaternion_capsule import QuaternionCapsule
from keras_capsules.layers.segmentation_capsule import LocalCapsule2D, LocalDeconvCapsule2D
from keras_capsules.layers.set_primary_capsule import SetPrimaryCapsule
from keras_capsules.layers.squash import Squash
from keras_capsules.layers.vector_routing import VectorRouting
