"""Whether a router's hand-written backward pass may run."""

import keras


def runs_manual_backward(backward):
    """`backward == "manual"`, except while torch traces a model for export.

    torch's exporters (the ONNX tracer, `torch.export`) cannot record the
    custom autograd function of a hand-written backward whose inputs
    include the router's weights, and an exported model needs no gradient:
    there the routers run their plain forward loop (the same numbers).

    Args:
        backward: the router's `backward` option.

    Returns:
        whether to route through the hand-written backward.
    """
    if backward != "manual":
        return False
    if keras.backend.backend() != "torch":
        return True
    import torch  # only on the torch backend

    return not (torch.jit.is_tracing() or torch.compiler.is_exporting())
