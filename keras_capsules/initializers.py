"""The capsule layers' default initializers, derived from the squash.

The squash (`keras_capsules.ops.squash`) is flat at 0: `squash(s) ~ |s| s`
there, so a capsule of length near 0 passes back almost no gradient, and a
layer of such capsules feeding another squash stays at chance. Keras's
`glorot_uniform` makes the capsules of a typical network start at lengths
of 1e-2 (primary) and 1e-4 to 1e-8 (routed), where that happens. These
initializers are derived, the way Keras's variance-scaling initializers
are, so that capsules start near the squash's knee (length ~0.5), where it
passes gradients best:

- primary capsules (`primary_kernel_initializer`,
  `primary_bias_initializer`): a kernel with variance `1 / (capsule_dim *
  fan_in)`, so that inputs of unit second moment give capsules of length
  ~1 before the squash, and a bias drawn with standard deviation
  `1 / sqrt(capsule_dim)`, a random offset of length ~1 per capsule type,
  so that capsules are off the squash's flat point whatever the scale of
  their inputs (a ReLU convolution with Keras's defaults feeds them
  features of second moment ~1e-4).
- routed capsules (`transform_initializer`): transforms `W` with
  standard deviation `vote_stddev / input_length`, so that child poses of
  length `input_length` (0.5: squashed capsules near the knee) give votes
  whose elements have the standard deviation `vote_stddev` that the layer's
  router asks for (`Router.vote_stddev`): `parents / sqrt(children * dim)`
  for routers that sum votes with coefficients that add to 1 over the
  parents (their parents' sums then start at length ~1), 1 for routers
  that average votes (EM's Gaussians then start with log-variance ~0).

- matrix capsules: every matrix layer receives poses whose elements have
  a standard deviation of ~`MATRIX_POSE_STDDEV` (0.2): `PrimaryMatrixCapsule`
  starts its poses there (pose kernel of variance `0.04 / fan_in`, pose
  bias of standard deviation 0.2, so even small inputs give such poses;
  activations near 0.5 with Keras's `glorot_uniform`), and EM
  routing of unit-variance votes gives parent poses of about that spread.
  `ConvMatrixCapsule` and `ClassMatrixCapsule` draw `W` with
  `transform_initializer(vote_stddev, MATRIX_ROW_LENGTH)`, so the votes
  have unit variance and every EM layer's activations start near their
  midpoint. With Keras's `glorot_uniform` the votes' variance falls below
  EM's floor, the activations of a `MatrixCapsNet` rise layer by layer to
  0.998 and the model stays at chance; with unit-variance primary poses
  they still rise to 0.96, because each EM layer's means shrink the poses.

Each layer uses these when its `kernel_initializer` (`bias_initializer`)
is `None`, the default; any Keras initializer may be passed instead.
"""

import math

import keras

# The typical length of a child capsule that a routed layer receives:
# squashed capsules started near the squash's knee.
INPUT_LENGTH = 0.5
# The standard deviation of 4x4 pose elements at initialisation: EM
# routing of unit-variance votes from a few dozen children or more gives
# parent poses (weighted means of the votes) of about this spread (measured
# 0.2 on the layers of `MatrixCapsNet`), and `PrimaryMatrixCapsule` starts
# its poses there too, so every matrix layer receives poses of one scale.
MATRIX_POSE_STDDEV = 0.2
# A vote element is a row of the child's pose times a column of `W`: the
# row (4 elements) plays the part of the child's pose.
MATRIX_ROW_LENGTH = 2.0 * MATRIX_POSE_STDDEV

# The standard deviation of a unit normal truncated at two standard
# deviations, as `keras.initializers.TruncatedNormal` draws it; dividing by
# it makes the drawn weights have the derived standard deviation (Keras's
# `VarianceScaling` does the same).
_TRUNCATED_STDDEV = 0.87962566103423978


def primary_kernel_initializer(capsule_dim):
    """The default kernel initializer of the primary capsules' convolution.

    `VarianceScaling(1 / capsule_dim, "fan_in", "truncated_normal")`: with
    inputs of unit second moment, each capsule element has variance
    `1 / capsule_dim` and each capsule a length of ~1 before the squash.

    Args:
        capsule_dim: the dimension of the capsules.

    Returns:
        a `keras.initializers.VarianceScaling`.

    Example:

    >>> init = keras_capsules.initializers.primary_kernel_initializer(8)
    >>> init.scale, init.mode
    (0.125, 'fan_in')
    """
    return keras.initializers.VarianceScaling(
        1.0 / capsule_dim, mode="fan_in", distribution="truncated_normal"
    )


def primary_bias_initializer(capsule_dim):
    """The default bias initializer of the primary capsules' convolution.

    `RandomNormal(stddev=1 / sqrt(capsule_dim))`: every capsule type starts
    with a random offset of length ~1, so its capsules are off the squash's
    flat point (length ~0.5 after the squash) even when the inputs are
    small.

    Args:
        capsule_dim: the dimension of the capsules.

    Returns:
        a `keras.initializers.RandomNormal`.

    Example:

    >>> init = keras_capsules.initializers.primary_bias_initializer(16)
    >>> init.stddev
    0.25
    """
    return keras.initializers.RandomNormal(stddev=1.0 / math.sqrt(capsule_dim))


def transform_initializer(vote_stddev, input_length=INPUT_LENGTH):
    """The default initializer of routed capsules' transforms `W`.

    A truncated normal whose samples have standard deviation
    `vote_stddev / input_length`: a child pose `u` of length `input_length`
    then gives votes `u @ W` whose elements have standard deviation
    `vote_stddev` (each is a sum of `in_dim` products `u_d W_de`, of
    variance `|u|^2 var(W)`).

    Args:
        vote_stddev: the standard deviation the votes' elements should
            start with (`Router.vote_stddev` of the layer's router).
        input_length: the typical length of the child poses.

    Returns:
        a `keras.initializers.TruncatedNormal`.

    Example (the class capsules of Sabour et al.: 1152 children of 8D,
    10 parents of 16D, dynamic routing):

    >>> std = keras_capsules.routing.DynamicRouting().vote_stddev(1152, 10, 16)
    >>> init = keras_capsules.initializers.transform_initializer(std)
    >>> round(init.stddev * 0.8796, 3)   # the drawn weights' standard deviation
    0.147
    """
    return keras.initializers.TruncatedNormal(stddev=vote_stddev / input_length / _TRUNCATED_STDDEV)


def householder_initializer():
    """The default initializer of Householder vectors (`orthogonal=True` in
    `Capsule` and `ConvCapsule1D/2D`).

    The transforms they make are orthogonal whatever the vectors' scale, so
    the votes keep the children's lengths and need no derived scale.

    Returns:
        a `keras.initializers.GlorotUniform`.

    Example:

    >>> type(keras_capsules.initializers.householder_initializer()).__name__
    'GlorotUniform'
    """
    return keras.initializers.GlorotUniform()
