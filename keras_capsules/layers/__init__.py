"""Capsule layers: primary capsules, routed capsule layers on one base
(`RoutedCapsule`), and the small layers around them."""

from keras_capsules.layers.auto_conv2d import AutoConv2D
from keras_capsules.layers.base_routed_capsule import RoutedCapsule
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.capsule_attention import CapsuleAttention
from keras_capsules.layers.capsule_pruning import CapsulePruning
from keras_capsules.layers.class_matrix_capsule import ClassMatrixCapsule
from keras_capsules.layers.conv_capsule_1d import ConvCapsule1D
from keras_capsules.layers.conv_capsule_2d import ConvCapsule2D
from keras_capsules.layers.conv_capsule_3d import ConvCapsule3D
from keras_capsules.layers.conv_matrix_capsule import ConvMatrixCapsule
from keras_capsules.layers.depthwise_primary_capsule import DepthwisePrimaryCapsule
from keras_capsules.layers.heinsen_capsule import HeinsenCapsule
from keras_capsules.layers.length import Length
from keras_capsules.layers.local_capsule_2d import LocalCapsule2D
from keras_capsules.layers.local_deconv_capsule_2d import LocalDeconvCapsule2D
from keras_capsules.layers.local_reference_frames import LocalReferenceFrames
from keras_capsules.layers.mask import Mask
from keras_capsules.layers.patch_decoder import PatchDecoder
from keras_capsules.layers.point_primary_capsule import PointPrimaryCapsule
from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.layers.primary_capsule_1d import PrimaryCapsule1D
from keras_capsules.layers.primary_capsule_3d import PrimaryCapsule3D
from keras_capsules.layers.primary_matrix_capsule import PrimaryMatrixCapsule
from keras_capsules.layers.quaternion_capsule import QuaternionCapsule
from keras_capsules.layers.set_primary_capsule import SetPrimaryCapsule
from keras_capsules.layers.squash import Squash
from keras_capsules.layers.vector_routing import VectorRouting
