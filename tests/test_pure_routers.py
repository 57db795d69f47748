"""The plain-framework routers of benchmarks/routing.py compute what the
library's routers compute: forward values and the votes' gradient, on the
current backend, with every router weight moved off its initial value.
(`benchmarks/routing.py` refuses to time a pair that disagrees; this test
finds the disagreement before a benchmark run does.)"""

import importlib
import importlib.util
import os
import sys

import keras
import numpy as np
import pytest

from tests.test_case import BACKEND, gradients, to_numpy

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks")
sys.path.insert(0, BENCHMARKS)  # the pure modules and the harness
# Loaded under a name of its own: "routing" alone could be another module.
_spec = importlib.util.spec_from_file_location(
    "routing_benchmark", os.path.join(BENCHMARKS, "routing.py")
)
routing_benchmark = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(routing_benchmark)

PURE_MODULE = routing_benchmark.PURE_MODULES[BACKEND]
SHAPE = (2, 12, 3, 4)  # (batch, in_caps, out_caps, dim)


@pytest.mark.parametrize("name", sorted(routing_benchmark.routers()))
def test_pure_router_matches_ours(name):
    pure = importlib.import_module(PURE_MODULE)
    router = routing_benchmark.routers()[name]()
    router.build(SHAPE)
    weights = routing_benchmark.randomise_weights(router)
    pure_route = pure.ROUTERS[type(router).__name__](router.get_config(), weights)
    rng = np.random.default_rng(0)
    votes = {"votes": keras.ops.convert_to_tensor(rng.normal(size=SHAPE).astype("float32"))}

    for ours, theirs in zip(router(votes["votes"]), pure_route(votes["votes"])):
        np.testing.assert_allclose(to_numpy(ours), to_numpy(theirs), rtol=1e-4, atol=1e-5)

    def ours_loss(t):
        poses, activations = router(t["votes"])
        return keras.ops.sum(poses * poses) + keras.ops.sum(activations)

    ours_grad = gradients(ours_loss, votes, ["votes"])["votes"]
    pure_grad = gradients(lambda t: pure.loss(pure_route(t["votes"])), votes, ["votes"])["votes"]
    scale = np.max(np.abs(to_numpy(pure_grad)))
    np.testing.assert_allclose(to_numpy(ours_grad), to_numpy(pure_grad), atol=1e-4 * scale)
