"""Attaches a hand-written backward pass to a routing loop, on every backend,
and says when one may run."""

import keras
from keras import ops


def with_backward(forward, backward, inputs):
    """`forward(*inputs)`'s output, with `backward` as its gradient.

    `ops.custom_gradient` differs by backend in what the gradient function
    receives: TensorFlow and JAX pass the upstream gradient positionally
    (the inputs come from a closure), torch passes the inputs it saved and
    `upstream=` by keyword. This hides the difference.

    Args:
        forward: `forward(*inputs) -> (output, saved)`: one output tensor
            (torch's custom gradients take one upstream tensor, so a router
            packs its outputs side by side) and whatever its backward needs.
        backward: `backward(inputs, saved, upstream)` -> one gradient per
            input, in order.
        inputs: the tensors to differentiate with respect to (a list).

    Returns:
        the output of `forward`.
    """
    # torch hands the saved inputs to `grad`: a closure over them would keep
    # the votes until the whole backward pass ends, not only until the
    # routing's own backward is done.
    closure_keeps_inputs = keras.backend.backend() != "torch"

    @ops.custom_gradient
    def route(*args):
        output, saved = forward(*args)
        held = args if closure_keeps_inputs else None

        def grad(*grad_args, upstream=None):
            if upstream is None:  # TensorFlow and JAX pass it positionally
                (upstream,) = grad_args
                grad_inputs = held
            else:
                grad_inputs = grad_args
            return tuple(backward(grad_inputs, saved, upstream))

        return output, grad

    return route(*inputs)


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
