"""Router: which routers may be shared between layers; a router as a layer."""

import numpy as np
import pytest

from keras_capsules.layers import Capsule
from keras_capsules.routing import DynamicRouting, EMRouting, SelfAttentionRouting
from tests.test_case import LayerTestCase


def test_a_router_without_weights_may_be_shared():
    # Documented reuse: DynamicRouting has no weights, so one instance
    # routes votes of any size (two Capsule layers of different sizes).
    router = DynamicRouting()
    first = Capsule(3, 4, router=router)(np.ones((2, 6, 4), "float32"))
    second = Capsule(2, 5, router=router)(np.ones((2, 5, 4), "float32"))
    assert tuple(first.shape) == (2, 3, 4) and tuple(second.shape) == (2, 2, 5)


@pytest.mark.parametrize("router_cls", (SelfAttentionRouting, EMRouting))
def test_a_router_with_weights_names_the_size_it_was_built_for(router_cls):
    router = router_cls()
    Capsule(3, 4, router=router)(np.ones((2, 6, 4), "float32"))
    n, in_caps = (3, 5) if router_cls is SelfAttentionRouting else (4, 6)
    with pytest.raises(ValueError, match="was built for votes with"):
        Capsule(n, 4, router=router)(np.ones((2, in_caps, 4), "float32"))


class TestRouterAsALayer(LayerTestCase):
    def test_layer(self):
        # A router called on its own in a functional model: save/load (it has
        # no build config, so the model's graph builds it again), a
        # jit-compiled train step and mixed precision.
        votes = np.random.default_rng(0).normal(size=(2, 6, 3, 16)).astype("float32")
        self.run_layer_test(
            EMRouting,
            {"iterations": 2},
            votes,
            ((2, 3, 16), (2, 3)),
            expected_num_trainable_weights=2,
            expected_num_non_trainable_weights=0,
        )
