"""Ready capsule networks: `keras.Model`s that train with `compile`/`fit`.

The task bases (`CapsuleTask`, the contract of every ready model;
`CapsuleModel`, its image form; `CapsuleClassifier`,
`CapsuleSegmenter`) and the ready models on them; each model with presets
registers them when its module is imported (`from_preset`,
`list_presets`).
"""

# PatchDecoder is a layer (layers/patch_decoder.py), exported here too: it was
# models.PatchDecoder before 0.3.0.
from keras_capsules.layers.patch_decoder import PatchDecoder
from keras_capsules.models.capsnet import CapsNet
from keras_capsules.models.capsule_classifier import CapsuleClassifier
from keras_capsules.models.capsule_image_classifier import CapsuleImageClassifier
from keras_capsules.models.capsule_model import CapsuleModel
from keras_capsules.models.capsule_segmenter import CapsuleSegmenter
from keras_capsules.models.capsule_sequence_classifier import CapsuleSequenceClassifier
from keras_capsules.models.capsule_task import CapsuleTask
from keras_capsules.models.efficient_capsnet import EfficientCapsNet
from keras_capsules.models.heinsen_capsnet import HeinsenCapsNet
from keras_capsules.models.matrix_capsnet import MatrixCapsNet
from keras_capsules.models.point_capsnet import PointCapsNet
from keras_capsules.models.point_capsule_classifier import PointCapsuleClassifier
from keras_capsules.models.presets import from_preset, list_presets
from keras_capsules.models.quaternion_capsule_classifier import QuaternionCapsuleClassifier
from keras_capsules.models.segcaps import SegCaps
from keras_capsules.models.xla import set_xla
