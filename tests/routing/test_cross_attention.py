"""CrossAttentionRouting: the float64 reference, heads, child activations as
weights, masks, config, training, errors. Values and gradients: also the
parity matrix."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.routing import CrossAttentionRouting
from tests.reference.attention import cross_attention_routing
from tests.test_case import LayerTestCase, to_numpy

VOTES = np.random.default_rng(0).normal(size=(2, 6, 3, 4)).astype("float32")


class TestCrossAttentionRouting(LayerTestCase):
    @pytest.mark.parametrize("num_heads", (1, 2))
    def test_layer(self, num_heads):
        self.run_layer_test(
            CrossAttentionRouting,
            {"num_heads": num_heads},
            VOTES,
            ((2, 3, 4), (2, 3)),
            run_mixed_precision_check=num_heads == 2,
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
        )


@pytest.mark.parametrize("num_heads", (1, 2, 4))
def test_matches_float64_reference(num_heads):
    router = CrossAttentionRouting(
        num_heads, query_initializer=keras.initializers.RandomNormal(stddev=1.0)
    )
    activations = np.random.default_rng(1).uniform(0.1, 1, size=(2, 6)).astype("float32")
    poses, lengths, c = router(VOTES, activations, return_coefficients=True)
    queries = to_numpy(router.queries).astype("float64")
    expected = cross_attention_routing(VOTES.astype("float64"), queries, num_heads, activations)
    for actual, wanted in zip((poses, lengths, c), expected):
        np.testing.assert_allclose(to_numpy(actual), wanted, rtol=1e-5, atol=1e-6)


def test_each_parent_attends_over_the_children_and_starts_as_their_mean():
    poses, _, c = CrossAttentionRouting(2)(VOTES, return_coefficients=True)
    c = to_numpy(c)
    np.testing.assert_allclose(c.sum(axis=1), 1.0, rtol=1e-6)
    # Queries start near 0: coefficients near uniform, parents near
    # squash(mean of the votes).
    np.testing.assert_allclose(c, 1 / 6, atol=0.02)


def test_children_of_activation_zero_take_no_part():
    router = CrossAttentionRouting(2)
    activations = np.array([[1, 1, 1, 1, 0, 0], [1] * 6], "float32")
    other = VOTES.copy()
    other[0, 4:] = 1e3
    masked = to_numpy(router(other, activations)[0])
    np.testing.assert_allclose(masked[0], to_numpy(router(VOTES[:1, :4])[0])[0], atol=1e-6)
    np.testing.assert_allclose(masked[1], to_numpy(router(VOTES[1:])[0])[0], atol=1e-6)


def test_learns_to_attend_to_the_informative_children():
    # Sets of 12 tokens of noise; 3 random ones carry the pattern of the
    # class. Learned queries pick them out: the loss falls, accuracy high.
    rng = np.random.default_rng(0)
    patterns = 2.0 * rng.normal(size=(3, 8))
    labels = rng.integers(0, 3, 512)
    x = rng.normal(size=(512, 12, 8))
    for n, label in enumerate(labels):
        x[n, rng.choice(12, 3, replace=False)] += patterns[label]
    keras.utils.set_random_seed(0)
    tokens = keras.Input((12, 8))
    capsules = kc.Capsule(3, 8, share_weights=True, router=CrossAttentionRouting(2))(tokens)
    model = keras.Model(tokens, kc.Length()(capsules))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=kc.MarginLoss(), metrics=["accuracy"])
    history = model.fit(x.astype("float32"), np.eye(3)[labels], batch_size=32, epochs=10, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert history.history["accuracy"][-1] > 0.85, history.history["accuracy"]


def test_errors_are_named():
    with pytest.raises(ValueError, match="num_heads=0"):
        CrossAttentionRouting(0)
    with pytest.raises(ValueError, match="num_heads=3"):
        CrossAttentionRouting(3)(VOTES)
    router = CrossAttentionRouting(2)
    router(VOTES)
    with pytest.raises(ValueError, match="out_caps=3"):
        router(VOTES[:, :, :2])
