"""keras-capsules: capsule networks and routing algorithms for Keras 3.

Layers and routers are written with `keras.ops` only and run unchanged on
TensorFlow, PyTorch and JAX.

Every public class of `layers`, `routing`, `losses`, `metrics`, `models`
and `callbacks` is also importable from the top level
(`keras_capsules.Capsule`, `keras_capsules.MarginLoss`, ...); functions
stay in their module (`keras_capsules.ops.squash`,
`keras_capsules.models.from_preset`).

Example (32 capsules of dimension 8 routed to 10 capsules of dimension 16):

>>> import keras_capsules as kc
>>> capsules = kc.Capsule(10, 16, router="dynamic")
>>> tuple(capsules(np.zeros((2, 32, 8), "float32")).shape)
(2, 10, 16)
"""

__version__ = "0.3.0"

from keras_capsules import (
    calibration,
    callbacks,
    capsule_measures,
    convert,
    diagnostics,
    initializers,
    labels,
    layers,
    losses,
    metrics,
    models,
    ops,
    point_cloud,
    quaternion,
    routing,
    saving,
)
from keras_capsules.callbacks import SpreadLossMarginScheduler
from keras_capsules.layers import (
    AutoConv2D,
    Capsule,
    CapsuleAttention,
    CapsulePruning,
    ClassMatrixCapsule,
    ConvCapsule1D,
    ConvCapsule2D,
    ConvCapsule3D,
    ConvMatrixCapsule,
    DepthwisePrimaryCapsule,
    HeinsenCapsule,
    Length,
    LocalCapsule2D,
    LocalDeconvCapsule2D,
    LocalReferenceFrames,
    Mask,
    PatchDecoder,
    PointPrimaryCapsule,
    PrimaryCapsule,
    PrimaryCapsule1D,
    PrimaryCapsule3D,
    PrimaryMatrixCapsule,
    QuaternionCapsule,
    RoutedCapsule,
    SetPrimaryCapsule,
    Squash,
    VectorRouting,
)
from keras_capsules.losses import (
    ChamferDistance,
    MarginLoss,
    SoftDiceLoss,
    SpreadLoss,
    WeightedBinaryCrossentropy,
)
from keras_capsules.metrics import DiceCoefficient, ExactSetAccuracy, LabelSetAccuracy
from keras_capsules.models import (
    CapsNet,
    CapsuleClassifier,
    CapsuleImageClassifier,
    CapsuleModel,
    CapsuleSegmenter,
    CapsuleSequenceClassifier,
    CapsuleTask,
    EfficientCapsNet,
    HeinsenCapsNet,
    MatrixCapsNet,
    PointCapsNet,
    PointCapsuleClassifier,
    QuaternionCapsuleClassifier,
    SegCaps,
)
from keras_capsules.routing import Router

# The routers, as registered (`keras_capsules.routing.registry`): a new
# router module needs no line here.
globals().update({cls.__name__: cls for cls in routing.classes()})
