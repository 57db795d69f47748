"""The old home of the matrix-capsule layers, kept so that its imports
still work; it defines nothing.

Each class is now in a module named after it: `PrimaryMatrixCapsule` in
`primary_matrix_capsule`, `ConvMatrixCapsule` in `conv_matrix_capsule`,
`ClassMatrixCapsule` in `class_matrix_capsule`; their shared helpers
(`POSE_SIZE`, `check_matrix_inputs`, ...) in `_matrix_pose`. Import the
classes from `keras_capsules.layers`. `models/matrix_capsnet.py` still
imports this module; once it imports the new ones, this module goes.
"""

from keras_capsules.layers._matrix_pose import (  # noqa: F401
    POSE_SIZE,
    check_matrix_inputs,
    matrix_transform_initializer,
    pose_votes,
)
from keras_capsules.layers.class_matrix_capsule import (  # noqa: F401
    ClassMatrixCapsule,
    coordinate_offsets,
)
from keras_capsules.layers.conv_matrix_capsule import ConvMatrixCapsule  # noqa: F401
from keras_capsules.layers.primary_matrix_capsule import PrimaryMatrixCapsule  # noqa: F401
