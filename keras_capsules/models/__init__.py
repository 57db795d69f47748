"""Ready capsule networks: `keras.Model`s that train with `compile`/`fit`."""

# Where it was before it joined the other layers (`keras_capsules.layers`).
from keras_capsules.layers.depthwise_primary_capsule import DepthwisePrimaryCapsule
from keras_capsules.models.backbone import BackboneCapsNet, CapsuleImageClassifier
from keras_capsules.models.base import CapsuleClassifier
from keras_capsules.models.capsnet import CapsNet
from keras_capsules.models.capsule_model import CapsuleModel
from keras_capsules.models.efficient_capsnet import EfficientCapsNet
from keras_capsules.models.heinsen_capsnet import HeinsenCapsNet
from keras_capsules.models.matrix_capsnet import MatrixCapsNet
from keras_capsules.models.presets import from_preset, list_presets
from keras_capsules.models.segcaps import SegCaps
