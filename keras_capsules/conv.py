"""2-D convolution computed four ways, and the rule that picks one.

A convolution can be computed four ways (`conv2d`): natively, as `kh * kw`
strided slices, concatenated, and one matmul (whose backward pass is a
matmul and pads), natively with the kernel gradient as one matmul on the
patches, or as one stride-1 convolution of the input rearranged into
stride-sized blocks (space to depth; every gradient is then a stride-1
convolution's). Which is fastest depends on the backend, the device and
whether XLA compiles the step: the `implementation=` argument of the
layers, and the rule its `"auto"` follows, are explained once, in
`resolve_implementation`; ready models tell their convolving layers about
XLA (`keras_capsules.models.set_xla`, which sets their `xla` attribute,
`keras_capsules.xla_hint`).

The sliding windows the matmul forms slice are in `keras_capsules.windows`.
"""

import os
import re

import keras
import numpy as np
from keras import ops

from keras_capsules.windows import extract_patches, same_padding, window_output_shape
from keras_capsules.xla_hint import cpu_only, xla_compiles

IMPLEMENTATIONS = ("auto", "conv", "matmul", "hybrid", "space_to_depth")


def resolve_implementation(implementation, strides, inputs=None, xla=None):
    """The `implementation=` rule of every layer that convolves.

    `AutoConv2D`, `PrimaryCapsule`, `PrimaryMatrixCapsule`,
    `MatrixCapsNet` (and the layers and models built on them) take
    `implementation`, one of:

    - `"conv"`: the backend's native convolution (`ops.conv`).
    - `"matmul"`: `kh * kw` strided slices, concatenated, and one matmul;
      its backward pass is a matmul and pads, never a convolution
      gradient. The same values as `"conv"` up to float rounding.
    - `"hybrid"`: the native convolution and input gradient, with the
      kernel gradient as one matmul on the patches (`conv2d_hybrid`).
    - `"space_to_depth"`: one stride-1 native convolution of the input
      rearranged into stride-sized blocks (`conv2d_space_to_depth`); its
      gradients are stride-1 convolutions' too.
    - `"auto"` (the default): the one measured fastest for this backend
      and device, and, on TensorFlow, for whether XLA compiles it
      (`xla`: the layer's `xla` attribute, which ready models set when
      compiled: `keras_capsules.models.set_xla`).

    From CPU measurements of each form (forward, input and kernel
    gradients: `benchmarks/conv.py`, whose tables are in the benchmarks'
    README), `"auto"` picks:

    - JAX on CPU: `"matmul"` for every stride (XLA's CPU convolutions,
      and their gradients, are slow), but `"conv"` for stride 1 when
      `XLA_FLAGS` turns off jaxlib's YNNPACK convolutions
      (`ynn_convolutions_off`: then they are the fastest);
    - TensorFlow on CPU, strided convolutions: `"matmul"` when XLA
      compiles the layer (`xla=True`; XLA's input gradient of a strided
      convolution is slow), `"conv"` when it does not (`xla=False`), and
      `"space_to_depth"`, decent both ways, when unknown (`xla=None`: a
      layer cannot tell whether XLA compiles it, and Keras's `compile`
      leaves XLA off on CPU); `"conv"` for stride 1;
    - torch on CPU: `"hybrid"` for strided convolutions (oneDNN's
      kernel gradient of a strided convolution is slow), `"conv"` for
      stride 1;
    - any GPU, and any other backend: `"conv"` (cuDNN).

    The choice changes speed only, never the model: layers do not save it
    in their configs (a file saved on one machine loads with `"auto"` on
    another), and the weights are the same whichever runs.

    Args:
        implementation: `"auto"`, `"conv"`, `"matmul"`, `"hybrid"` or
            `"space_to_depth"`.
        strides: the convolution's strides, a tuple of ints.
        inputs: the layer's input; tells torch's device (the other
            backends read `keras.distribution.list_devices()`).
        xla: `True` when XLA is known to compile the layer, `False` when it
            is known not to, `None` (the default) when unknown.

    Returns:
        `"conv"`, `"matmul"`, `"hybrid"` or `"space_to_depth"`:
        `implementation` itself unless it is `"auto"`.

    Example:

    >>> from keras_capsules.conv import resolve_implementation
    >>> resolve_implementation("matmul", (2, 2))
    'matmul'
    >>> resolve_implementation("auto", (1, 1)) in ("conv", "matmul")  # stride 1
    True
    """
    if implementation != "auto":
        return implementation
    backend = keras.backend.backend()
    strided = any(s > 1 for s in strides)
    if backend == "torch":
        # "meta": Keras traces symbolic shapes on torch's meta device.
        device = getattr(getattr(inputs, "device", None), "type", "cpu")
        return "hybrid" if strided and device in ("cpu", "meta") else "conv"
    if backend not in ("jax", "tensorflow") or not cpu_only():
        return "conv"
    if backend == "jax":
        return "conv" if not strided and ynn_convolutions_off() else "matmul"
    if not strided:
        return "conv"
    if xla is None:
        return "space_to_depth"
    return "matmul" if xla else "conv"


def ynn_convolutions_off(flags=None):
    """Whether `XLA_FLAGS` keeps XLA:CPU's YNNPACK convolutions off.

    jaxlib's XLA:CPU runs convolutions through YNNPACK, 1.6-3x slower here
    than its own (Efficient-CapsNet's 3x3 convs, forward + gradients) and
    no faster than slices + matmul, hence `"matmul"` on JAX. With
    `XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-individual_convolution`
    set before JAX's first computation, the native stride-1 convolution is
    the fastest (`"auto"` then picks `"conv"` for stride 1).

    Args:
        flags: the flags to read; `None` reads `os.environ["XLA_FLAGS"]`.

    Returns:
        `True` when the flags remove YNNPACK's convolution fusion.

    Example:

    >>> from keras_capsules.conv import ynn_convolutions_off
    >>> ynn_convolutions_off("--xla_cpu_experimental_ynn_fusion_type=-individual_convolution")
    True
    >>> ynn_convolutions_off("--xla_cpu_experimental_ynn_fusion_type=")  # none at all
    True
    >>> ynn_convolutions_off("")
    False
    """
    flags = os.environ.get("XLA_FLAGS", "") if flags is None else flags
    found = re.findall(r"--xla_cpu_experimental_ynn_fusion_type=(\S*)", flags)
    if not found:
        return False
    items = [item for item in found[-1].split(",") if item]
    if any(item[0] in "+-" for item in items):  # edits of the default list
        return "-individual_convolution" in items
    return "individual_convolution" not in items  # the whole list


def conv2d(x, kernel, strides, padding, implementation="conv"):
    """`ops.conv(x, kernel, strides, padding)` (channels last), computed by
    `implementation`.

    Args:
        x: images `(batch, H, W, C_in)`.
        kernel: `(kh, kw, C_in, C_out)`.
        strides: a pair of ints.
        padding: `"valid"` or `"same"`.
        implementation: `"conv"`, `"matmul"`, `"hybrid"` or
            `"space_to_depth"` (resolved, not `"auto"`: see
            `resolve_implementation`).

    Returns:
        `(batch, H', W', C_out)`, as `ops.conv`.

    Example:

    >>> from keras_capsules.conv import conv2d
    >>> x, k = keras.random.normal((1, 7, 7, 2)), keras.random.normal((3, 3, 2, 4))
    >>> y = conv2d(x, k, (2, 2), "valid", implementation="matmul")
    >>> tuple(y.shape)
    (1, 3, 3, 4)
    >>> expected = ops.conv(x, k, strides=(2, 2), padding="valid")
    >>> np.allclose(ops.convert_to_numpy(y), ops.convert_to_numpy(expected), atol=1e-4)
    True
    """
    if implementation == "conv":
        return ops.conv(x, kernel, strides=strides, padding=padding)
    if implementation == "hybrid":
        return conv2d_hybrid(x, kernel, strides, padding)
    if implementation == "space_to_depth":
        return conv2d_space_to_depth(x, kernel, strides, padding)
    kh, kw, cin, cout = kernel.shape
    patches = extract_patches(x, (kh, kw), strides, padding)
    return ops.matmul(patches, ops.reshape(kernel, (kh * kw * cin, cout)))


def resolve_implementation_3d(implementation, xla=None):
    """The `implementation=` rule of the 3-D convolving layers
    (`PrimaryCapsule3D`): `"conv"` (`ops.conv`), `"matmul"` (strided
    slices and one matmul, `conv3d`), or `"auto"`: the one measured faster
    (`benchmarks/conv3d.py`, forward and both gradients; the tables are in
    the benchmarks' README):

    - on a CPU under XLA (JAX; TensorFlow when `xla` says XLA compiles the
      layer, `keras_capsules.xla_hint.xla_compiles`): `"matmul"`. XLA's
      CPU 3-D convolutions are slow, their strided gradients very slow
      (a 5x5x5 stride-2 primary convolution of 32^3 volumes: 13.1-13.8 s
      native against 31-39 ms as a matmul);
    - TensorFlow without XLA, torch, and every GPU: `"conv"` (36 against
      108 ms on TensorFlow, 34 against 58 ms on torch, for that
      convolution).

    Args:
        implementation: `"auto"`, `"conv"` or `"matmul"`.
        xla: the layer's `xla` hint (`keras_capsules.xla_hint`).

    Returns:
        `"conv"` or `"matmul"`.

    Example:

    >>> from keras_capsules.conv import resolve_implementation_3d
    >>> resolve_implementation_3d("matmul")
    'matmul'
    """
    if implementation != "auto":
        return implementation
    if xla_compiles(xla) and cpu_only():  # torch first: it compiles no XLA
        return "matmul"
    return "conv"


def conv3d(x, kernel, strides, padding, implementation="conv"):
    """`ops.conv(x, kernel, strides, padding)` of volumes (channels last),
    computed natively (`"conv"`) or as `kd * kh * kw` strided slices,
    concatenated, and one matmul (`"matmul"`; its backward pass is a
    matmul and pads, never a convolution gradient).

    Args:
        x: volumes `(batch, D, H, W, C_in)`.
        kernel: `(kd, kh, kw, C_in, C_out)`.
        strides: three ints.
        padding: `"valid"` or `"same"`.
        implementation: `"conv"` or `"matmul"` (resolved: see
            `resolve_implementation_3d`).

    Returns:
        `(batch, D', H', W', C_out)`, as `ops.conv`.

    Example:

    >>> from keras_capsules.conv import conv3d
    >>> x, k = keras.random.normal((1, 5, 6, 7, 2)), keras.random.normal((3, 3, 3, 2, 4))
    >>> y = conv3d(x, k, (2, 2, 2), "same", implementation="matmul")
    >>> tuple(y.shape)
    (1, 3, 3, 4, 4)
    >>> expected = ops.conv(x, k, strides=(2, 2, 2), padding="same")
    >>> np.allclose(ops.convert_to_numpy(y), ops.convert_to_numpy(expected), atol=1e-4)
    True
    """
    if implementation == "conv":
        return ops.conv(x, kernel, strides=strides, padding=padding)
    if implementation != "matmul":
        raise ValueError(
            "conv3d's implementation must be 'conv' or 'matmul'. "
            f"Received: implementation={implementation!r}"
        )
    *kernel_size, cin, cout = kernel.shape
    patches = extract_patches(x, tuple(kernel_size), strides, padding)
    return ops.matmul(patches, ops.reshape(kernel, (int(np.prod(kernel_size)) * cin, cout)))


def conv2d_hybrid(x, kernel, strides, padding):
    """The native convolution with its kernel gradient computed as a matmul.

    For backends whose native kernel gradient is slow (torch on CPU: see
    `resolve_implementation`), `patches^T @ upstream`, with the patches
    recomputed from `x`, is faster. The input gradient stays native: the
    forward conv sees a constant kernel, and an identity with a custom
    gradient adds the kernel's:

    ```
    y  = identity(conv(x, stop_gradient(k)), k)   # the native conv's value
    dx = native input gradient of conv            # autodiff, as for "conv"
    dk = reshape(patches(x)^T @ dy, k.shape)      # (kh*kw*cin, cout) matmul
    ```

    Args and Returns: as for `conv2d`.

    Example:

    >>> from keras_capsules.conv import conv2d_hybrid
    >>> x, k = keras.random.normal((1, 7, 7, 2)), keras.random.normal((3, 3, 2, 4))
    >>> tuple(conv2d_hybrid(x, k, (2, 2), "same").shape)
    (1, 4, 4, 4)
    """
    kh, kw, cin, cout = kernel.shape
    kernel = ops.convert_to_tensor(kernel)
    y = ops.conv(x, ops.stop_gradient(kernel), strides=strides, padding=padding)

    @ops.custom_gradient
    def with_kernel_gradient(y, kernel, x):
        def grad(*args, upstream=None):
            if upstream is None:  # TensorFlow and JAX pass it positionally
                (upstream,) = args
            patches = extract_patches(x, (kh, kw), strides, padding)
            patches = ops.reshape(patches, (-1, kh * kw * cin))
            dk = ops.matmul(ops.transpose(patches), ops.reshape(upstream, (-1, cout)))
            return upstream, ops.reshape(dk, kernel.shape), None

        return y, grad

    return with_kernel_gradient(y, kernel, ops.stop_gradient(x))


def conv2d_space_to_depth(x, kernel, strides, padding):
    """A strided convolution as one stride-1 convolution of stride-sized blocks.

    With strides `(sh, sw)`, input pixel `(p * s + d)` on an axis is pixel
    `d` of block `p`: the blocks `(sh, sw, C_in)` become the channels of a
    grid `s` times smaller, and the kernel, zero-padded to whole blocks
    (`kb = ceil(k / s)` per axis), is rearranged the same way:

    ```
    x = pad(x) if padding == "same"      # as a convolution would
    o = (n - k) // s + 1, kb = ceil(k / s), nb = o + kb - 1    # per axis
    x = crop_or_zero_pad(x, nb * s)      # (B, nbh * sh, nbw * sw, C_in)
    x = reshape(transpose(reshape(x, (B, nbh, sh, nbw, sw, C_in)),
                          (0, 1, 3, 2, 4, 5)), (B, nbh, nbw, sh * sw * C_in))
    k = zero_pad(kernel, (kbh * sh, kbw * sw))
    k = reshape(transpose(reshape(k, (kbh, sh, kbw, sw, C_in, C_out)),
                          (0, 2, 1, 3, 4, 5)), (kbh, kbw, sh * sw * C_in, C_out))
    y = conv(x, k, strides=1, padding="valid")                 # (B, oh, ow, C_out)
    ```

    The padded kernel taps meet zeros or pixels past the last window, so
    `y` is the strided convolution; its input and kernel gradients are
    those of a stride-1 convolution, which no backend computes as slowly
    as XLA's CPU gradients of a strided one (see `resolve_implementation`).

    Args:
        x: images `(batch, H, W, C_in)`, `H` and `W` known.
        kernel: `(kh, kw, C_in, C_out)`.
        strides: a pair of ints.
        padding: `"valid"` or `"same"`.

    Returns:
        `(batch, H', W', C_out)`, as `ops.conv`.

    Example:

    >>> from keras_capsules.conv import conv2d_space_to_depth
    >>> x, k = keras.random.normal((1, 9, 8, 2)), keras.random.normal((3, 3, 2, 4))
    >>> y = conv2d_space_to_depth(x, k, (2, 2), "same")
    >>> tuple(y.shape)
    (1, 5, 4, 4)
    >>> expected = ops.conv(x, k, strides=(2, 2), padding="same")
    >>> np.allclose(ops.convert_to_numpy(y), ops.convert_to_numpy(expected), atol=1e-4)
    True
    """
    kh, kw, cin, cout = kernel.shape
    (sh, sw), kernel_size = strides, (kh, kw)
    if padding == "same":
        x = ops.pad(x, [(0, 0), *same_padding(x.shape[1:3], kernel_size, strides), (0, 0)])
    out = window_output_shape(x.shape[1:3], kernel_size, strides, "valid")
    bh, bw = (-(-k // s) for k, s in zip(kernel_size, strides))
    nh, nw = out[0] + bh - 1, out[1] + bw - 1
    x = x[:, : nh * sh, : nw * sw]
    x = ops.pad(x, [(0, 0), (0, nh * sh - x.shape[1]), (0, nw * sw - x.shape[2]), (0, 0)])
    x = ops.transpose(ops.reshape(x, (-1, nh, sh, nw, sw, cin)), (0, 1, 3, 2, 4, 5))
    x = ops.reshape(x, (-1, nh, nw, sh * sw * cin))
    k = ops.pad(kernel, [(0, bh * sh - kh), (0, bw * sw - kw), (0, 0), (0, 0)])
    k = ops.transpose(ops.reshape(k, (bh, sh, bw, sw, cin, cout)), (0, 2, 1, 3, 4, 5))
    k = ops.reshape(k, (bh, bw, sh * sw * cin, cout))
    return ops.conv(x, k, strides=1, padding="valid")


def _subpixel_taps(size, kernel, stride, padding):
    """Per axis of a transposed convolution: the input offsets `lo` and the
    stride-1 window `taps[r, t]` (kernel index, or `kernel` for a zero tap)
    of each output phase `r`, and the output and phase-grid lengths."""
    # Python ints: torch's ONNX tracing hands sizes over as tensors.
    size, kernel, stride = int(size), int(kernel), int(stride)
    pad = max(kernel - stride, 0) // 2 if padding == "same" else 0
    out = size * stride if padding == "same" else (size - 1) * stride + max(kernel, stride)
    # Output q = m * s + r takes x[m + a - j] * K[b + j * s], r + pad = a * s + b.
    phases = [divmod(r + pad, stride) for r in range(stride)]
    lo = min(a - (kernel - b + stride - 1) // stride + 1 for a, b in phases)
    hi = max(a for a, _ in phases)
    taps = [
        [
            b + (a - d) * stride if 0 <= b + (a - d) * stride < kernel else kernel
            for d in range(lo, hi + 1)
        ]
        for a, b in phases
    ]
    return lo, hi, taps, out, -(-out // stride)


def _tap_selection(taps, kernel, dtype):
    """`(phases, window, kernel)` 0/1 matrix: row `[r, t]` picks kernel tap
    `taps[r][t]`, or nothing where it is `kernel` (a zero tap)."""
    select = np.zeros((len(taps), len(taps[0]), kernel), "float32")
    for r, row in enumerate(taps):
        for t, tap in enumerate(row):
            if tap < kernel:
                select[r, t, tap] = 1.0
    return ops.convert_to_tensor(select, dtype)


def conv2d_transpose(x, kernel, strides, padding, implementation="conv"):
    """`ops.conv_transpose(x, kernel, strides, padding)` (channels last),
    natively (`"conv"`) or as one stride-1 convolution of every output
    phase at once (any other `implementation`, which then computes that
    convolution: see `conv2d`).

    A transposed convolution with strides `s` is, for each output phase
    `r` (`q = m * s + r` on an axis), a stride-1 convolution of `x` with
    the kernel taps that land on `r`. Those `s * s` small kernels, zero-
    padded to one window, are the output channels of one convolution
    whose result is rearranged from depth to space (sub-pixel
    convolution). Its gradients are stride-1 convolutions' too, which XLA
    on CPU computes far faster than the gradient of a transposed one.

    Args:
        x: images `(batch, H, W, C_in)`, `H` and `W` known.
        kernel: `(kh, kw, C_out, C_in)`, as `ops.conv_transpose`.
        strides: a pair of ints.
        padding: `"valid"` or `"same"`.
        implementation: `"conv"` (native), or `"matmul"`, `"hybrid"`,
            `"space_to_depth"` for the sub-pixel form's convolution.

    Returns:
        `(batch, H', W', C_out)`, as `ops.conv_transpose`.

    Example:

    >>> from keras_capsules.conv import conv2d_transpose
    >>> x, k = keras.random.normal((1, 5, 4, 3)), keras.random.normal((4, 4, 2, 3))
    >>> y = conv2d_transpose(x, k, (2, 2), "same", implementation="matmul")
    >>> tuple(y.shape)
    (1, 10, 8, 2)
    >>> expected = ops.conv_transpose(x, k, strides=(2, 2), padding="same")
    >>> np.allclose(ops.convert_to_numpy(y), ops.convert_to_numpy(expected), atol=1e-4)
    True
    """
    if implementation == "conv":
        return ops.conv_transpose(x, kernel, strides=strides, padding=padding)
    kh, kw, cout, cin = (int(d) for d in kernel.shape)
    (sh, sw), (h, w) = strides, (int(d) for d in x.shape[1:3])
    lo_h, hi_h, taps_h, out_h, grid_h = _subpixel_taps(h, kh, sh, padding)
    lo_w, hi_w, taps_w, out_w, grid_w = _subpixel_taps(w, kw, sw, padding)
    # The (window, window, C_in, phases * C_out) kernel of the stride-1
    # conv, gathered by 0/1 selection matrices (an einsum: exports to ONNX
    # on every backend, where a gather of 2-D indices does not on torch).
    select_h = _tap_selection(taps_h, kh, kernel.dtype)  # (sh, window_h, kh)
    select_w = _tap_selection(taps_w, kw, kernel.dtype)
    k = ops.einsum("rah,sbw,hwoi->abirso", select_h, select_w, kernel)
    k = ops.reshape(k, (hi_h - lo_h + 1, hi_w - lo_w + 1, cin, sh * sw * cout))
    # Input rows m + lo .. m + hi for the phase grid's m = 0 .. grid - 1.
    x = x[:, max(lo_h, 0) :, max(lo_w, 0) :]
    x = ops.pad(
        x,
        [
            (0, 0),
            (max(-lo_h, 0), max(grid_h - 1 + hi_h - (h - 1), 0)),
            (max(-lo_w, 0), max(grid_w - 1 + hi_w - (w - 1), 0)),
            (0, 0),
        ],
    )
    x = x[:, : grid_h + hi_h - lo_h, : grid_w + hi_w - lo_w]
    y = conv2d(x, k, (1, 1), "valid", implementation)
    y = ops.transpose(ops.reshape(y, (-1, grid_h, grid_w, sh, sw, cout)), (0, 1, 3, 2, 4, 5))
    return ops.reshape(y, (-1, grid_h * sh, grid_w * sw, cout))[:, :out_h, :out_w]
