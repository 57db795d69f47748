"""Routers with weights per child refuse an unknown number of children at
build time, and say how to route sets and sequences of any size."""

import keras
import pytest

import keras_capsules as kc


@pytest.mark.parametrize(
    "router, advice",
    [
        (kc.HeinsenRouting(), r"router=HeinsenRouting\(share_weights=True\)"),
        (kc.SelfRouting(), r"use a router that routes any number of children"),
        (kc.SelfAttentionRouting(use_priors=True), r"SelfAttentionRouting\(use_priors=False\)"),
    ],
)
def test_unknown_children_get_advice(router, advice):
    with pytest.raises(ValueError, match=advice) as error:
        kc.Capsule(3, 4, share_weights=True, router=router).build((None, None, 8))
    assert "Received: votes.shape=(None, None, 3, 4)" in str(error.value)


@pytest.mark.parametrize(
    "router",
    ["dynamic", kc.HeinsenRouting(share_weights=True), kc.SelfAttentionRouting(use_priors=False)],
)
def test_the_advice_works(router):
    inputs = keras.Input((None, 8))
    outputs = kc.Capsule(3, 4, share_weights=True, router=router)(inputs)
    assert tuple(outputs.shape) == (None, 3, 4)
