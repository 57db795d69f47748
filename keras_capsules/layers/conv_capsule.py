"""The base of the convolutional capsule layers (`ConvCapsule1D`,
`ConvCapsule2D`, `ConvCapsule3D`): routing restricted to local windows."""

import math

from keras import ops

from keras_capsules.initializers import householder_initializer, transform_initializer
from keras_capsules.layers.base_routed_capsule import split_capsule_inputs
from keras_capsules.layers.windowed_capsule import WindowedCapsule
from keras_capsules.ops import compute_dtype_for, householder_orthogonal
from keras_capsules.validation import boolean, positive_int


class ConvCapsule(WindowedCapsule):
    """Shared code of ConvCapsule1D, ConvCapsule2D and ConvCapsule3D (see
    ConvCapsule2D)."""

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        kernel_size=3,
        strides=1,
        padding="valid",
        router=None,
        orthogonal=False,
        return_activations=False,
        kernel_initializer=None,
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(
            num_capsules,
            kernel_size,
            strides=strides,
            padding=padding,
            router=router,
            kernel_initializer=kernel_initializer,
            kernel_regularizer=kernel_regularizer,
            kernel_constraint=kernel_constraint,
            **kwargs,
        )
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.orthogonal = boolean(orthogonal, "orthogonal")
        self.return_activations = boolean(return_activations, "return_activations")
        # With orthogonal=True the weight holds Householder vectors, whose
        # reflections are computed in float32.
        self._kernel_name = "householder" if self.orthogonal else "kernel"
        self._kernel_autocast = not self.orthogonal

    def _default_kernel_initializer(self, types, in_dim):
        if self.orthogonal:
            return householder_initializer
        children = math.prod(self.kernel_size) * types
        vote_stddev = self.router.vote_stddev(children, self.num_capsules, self.capsule_dim)
        return lambda: transform_initializer(vote_stddev)

    def _kernel_shape(self, types, in_dim):
        if self.orthogonal:
            n = max(in_dim, self.capsule_dim)
            return (*self.kernel_size, types, self.num_capsules, n, n)
        return (*self.kernel_size, types, self.num_capsules, in_dim, self.capsule_dim)

    def transforms(self):
        """The transforms `W`, `(*kernel_size, types, num_capsules, in_dim,
        capsule_dim)`; with `orthogonal=True` each is the top-left block of a
        product of Householder reflections (see `Capsule`)."""
        if self.orthogonal:
            w = householder_orthogonal(self.householder, self.in_dim, self.capsule_dim)
            return ops.cast(w, self.compute_dtype)
        return self.kernel

    def _out_dim(self, in_dim):
        return self.capsule_dim

    def _votes(self, windows):
        k, types = windows.shape[1:3]
        transforms = self.transforms()
        kernel = ops.reshape(transforms, (k, *transforms.shape[self.rank :]))
        # In the routing dtype, as `Capsule.votes`.
        dtype = compute_dtype_for(self.compute_dtype)
        votes = ops.einsum("nktd,ktjde->nktje", ops.cast(windows, dtype), ops.cast(kernel, dtype))
        return ops.reshape(votes, (-1, k * types, self.num_capsules, self.capsule_dim))

    def call(self, inputs, return_coefficients=False):
        poses, activations = split_capsule_inputs(inputs)
        poses, activations = self._to_grid(poses, activations)
        outputs = self._route_windows(poses, activations, return_coefficients)
        main = outputs[:2] if self.return_activations else outputs[0]
        return (main, outputs[2]) if return_coefficients else main

    def _to_grid(self, poses, activations):
        return poses, activations

    def compute_output_shape(self, input_shape):
        poses, activations = self._output_shapes(input_shape)
        return (poses, activations) if self.return_activations else poses

    def get_config(self):
        config = super().get_config()
        config.update(
            capsule_dim=self.capsule_dim,
            orthogonal=self.orthogonal,
            return_activations=self.return_activations,
        )
        return config
