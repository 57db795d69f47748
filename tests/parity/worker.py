"""Runs every parity case on one backend; writes outputs and gradients.

usage: python -m tests.parity.worker BACKEND OUT.npz

A backend cannot change inside a process, so the parity test starts one
worker per backend. A case that raises is recorded with its traceback, so
only that case fails.
"""

import os
import sys
import traceback


def main(backend, out_path):
    os.environ["KERAS_BACKEND"] = backend
    try:
        import torch  # noqa: F401  (torch before tensorflow: see conftest)
    except ImportError:
        pass
    import numpy as np

    from tests.parity.backend_grad import outputs_and_grads
    from tests.parity.registry import load_cases

    results = {}
    for name, case in load_cases().items():
        try:
            layer = case.build()
            outputs, grads = outputs_and_grads(case, layer, case.make_inputs())
            for i, o in enumerate(outputs):
                results[f"{name}|out|{i}"] = o
            for k, g in grads.items():
                results[f"{name}|grad|{k}"] = g
        except Exception:
            results[f"{name}|error"] = np.array(traceback.format_exc())
    np.savez(out_path, **results)


if __name__ == "__main__":
    main(*sys.argv[1:])
