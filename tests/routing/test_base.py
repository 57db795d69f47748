"""Router: which routers may be shared between layers."""

import numpy as np
import pytest

from keras_capsules.layers import Capsule
from keras_capsules.routing import DynamicRouting, EMRouting, SelfAttentionRouting


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
