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


@pytest.mark.parametrize("name", kc.routing.names())
def test_the_declared_children_exponent_is_the_vote_stddev_law(name):
    # `coherent_children_exponent` says how `vote_stddev` falls with the
    # number of coherent children, which the layers of unknown size use.
    router = kc.routing.get(name)
    ratio = router.vote_stddev(256, 4, 16, coherent=True) / router.vote_stddev(
        512, 4, 16, coherent=True
    )
    assert ratio == pytest.approx(2.0**router.coherent_children_exponent, rel=1e-6)
