"""The XLA flags the example scripts and benchmarks set.

`YNN_CONVOLUTIONS_OFF` turns off jaxlib's YNNPACK convolutions on XLA:CPU
(`common.use_xla_cpu_convolutions` adds it to `XLA_FLAGS` on JAX): XLA's
own convolutions are 1.6-3x faster here (`benchmarks/README.md`), and with
them `implementation="auto"` takes the native stride-1 convolution
(`keras_capsules.conv.ynn_convolutions_off` reads the flag).
"""

YNN_CONVOLUTIONS_OFF = "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution"
