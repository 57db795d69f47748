"""Ready capsule networks: `keras.Model`s that train with `compile`/`fit`."""

from keras_capsules.models.backbone import BackboneCapsNet
from keras_capsules.models.base import CapsuleClassifier
from keras_capsules.models.capsule_model import CapsuleModel
from keras_capsules.models.capsnet import CapsNet
from keras_capsules.models.efficient_capsnet import DepthwisePrimaryCapsule, EfficientCapsNet
from keras_capsules.models.matrix_capsnet import MatrixCapsNet
