"""Parity cases of issue 46: VectorRouting (Heinsen, 2022), any length with a
mask of padded inputs, and per-position parameters."""

import numpy as np

import keras_capsules
from tests.parity.registry import Case, register, stateless
from tests.reference.vector_routing import vector_routing

N_OUT, D_IN, D_OUT = 3, 4, 5


def _inputs(num_inputs, lengths):
    def inputs(rng):
        rows = num_inputs or 1
        n = num_inputs or max(lengths)
        shapes = {
            "activation_kernel": (rows, D_IN),
            "activation_bias": (rows,),
            "vote_scale": (N_OUT, D_IN),
            "vote_kernel": (D_IN, D_OUT),
            "vote_bias": (N_OUT, D_OUT),
            "prediction_kernel": (D_OUT, D_IN),
            "prediction_scale": (N_OUT, D_IN),
            "prediction_bias": (N_OUT, D_IN),
            "agreement_scale": (rows, N_OUT),
            "agreement_bias": (rows, N_OUT),
        }
        if num_inputs is None:
            shapes.update(
                beta_use_kernel=(D_IN, N_OUT),
                beta_use_bias=(N_OUT,),
                beta_ign_kernel=(D_IN, N_OUT),
                beta_ign_bias=(N_OUT,),
            )
        else:
            shapes.update(beta_use=(rows, N_OUT), beta_ign=(rows, N_OUT))
        arrays = {name: rng.normal(size=shape) * 0.7 for name, shape in shapes.items()}
        arrays["x"] = rng.normal(size=(len(lengths), n, D_IN))
        arrays["keep"] = (np.arange(n) < np.array(lengths)[:, None]).astype(np.float64)
        return arrays

    return inputs


def _weights(arrays):
    return {k: v for k, v in arrays.items() if k not in ("x", "keep")}


def _register(name, num_inputs, lengths, iterations, normalize=True):
    def reference(a):
        routed = vector_routing(
            a["x"], _weights(a), [int(k.sum()) for k in a["keep"]], iterations, normalize
        )
        return list(routed)

    register(
        Case(
            name=f"vector-routing-{name}",
            inputs=_inputs(num_inputs, lengths),
            build=lambda: keras_capsules.layers.VectorRouting(
                N_OUT, D_OUT, iterations=iterations, num_inputs=num_inputs, normalize=normalize
            ),
            reference=reference,
            forward=lambda layer, t: list(
                stateless(layer, t, t["x"], mask=t["keep"], return_coefficients=True)
            ),
            diff=("x", "activation_kernel", "vote_kernel", "prediction_kernel", "agreement_scale")
            + (("beta_use_kernel",) if num_inputs is None else ("beta_use",)),
        )
    )


_register("any-masked-it2", None, (6, 4), 2)
_register("any-masked-it3-unnormalized", None, (5, 2), 3, normalize=False)
_register("fixed-it3", 5, (5, 5), 3)
