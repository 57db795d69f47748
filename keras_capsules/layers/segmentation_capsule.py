"""The old home of SegCaps's capsule layers, kept so that its imports still
work; it defines nothing.

Each class is now in a module named after it: `LocalCapsule2D` in
`local_capsule_2d`, `LocalDeconvCapsule2D` in `local_deconv_capsule_2d`,
their shared base `LocalCapsuleBase` in `local_capsule_base`. Import the
classes from `keras_capsules.layers`. `models/segcaps.py` still imports
this module; once it imports the new ones, this module goes.
"""

from keras_capsules.layers.local_capsule_2d import LocalCapsule2D  # noqa: F401
from keras_capsules.layers.local_capsule_base import LocalCapsuleBase  # noqa: F401
from keras_capsules.layers.local_deconv_capsule_2d import LocalDeconvCapsule2D  # noqa: F401
