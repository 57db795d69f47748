"""Non-finite inputs of the quaternion capsules stay in their sample, also
compiled (`predict`: XLA on JAX, a `tf.function` on TensorFlow), where a
NaN times the 0 of an empty parent used to fold to 0 on JAX."""

import keras
import numpy as np

import keras_capsules as kc


def _routed_activations():
    votes = keras.Input((6, 3, 4))
    _, activations = kc.routing.QuaternionRouting(iterations=2)(votes)
    return keras.Model(votes, activations)


def _unit_votes(rng, batch):
    votes = rng.normal(size=(batch, 6, 3, 4)).astype("float32")
    return votes / np.linalg.norm(votes, axis=-1, keepdims=True)


def test_routing_nan_vote_gives_nan_activations_for_its_sample_only():
    keras.utils.set_random_seed(0)
    model = _routed_activations()
    votes = _unit_votes(np.random.default_rng(0), 3)
    clean = model.predict(votes, verbose=0)
    votes[1, 2, :, 1] = np.nan  # a child whose votes are all NaN
    scores = model.predict(votes, verbose=0)
    assert np.isnan(scores[1]).all(), scores[1]
    np.testing.assert_allclose(scores[[0, 2]], clean[[0, 2]], rtol=1e-6)
    assert np.isfinite(clean).all()


def test_routing_zero_activations_still_give_zero():
    # Children of activation 0 (padding): their parents' activation is 0,
    # not NaN, compiled as well.
    votes = keras.Input((6, 3, 4))
    activations = keras.Input((6,))
    router = kc.routing.QuaternionRouting(iterations=2)
    model = keras.Model([votes, activations], router(votes, activations)[1])
    rng = np.random.default_rng(1)
    a = np.ones((2, 6), "float32")
    a[1] = 0.0
    scores = model.predict([_unit_votes(rng, 2), a], verbose=0)
    np.testing.assert_array_equal(scores[1], 0.0)
    assert (scores[0] > 0).all()


def test_classifier_nan_cloud_gives_nan_scores_for_its_cloud_only():
    keras.utils.set_random_seed(0)
    model = kc.models.QuaternionCapsuleClassifier(
        3, primary_capsules=2, num_patches=4, patch_size=4, frame_neighbors=4
    )
    points = np.random.default_rng(0).normal(size=(3, 16, 3)).astype("float32")
    clean = model.predict(points, verbose=0)
    points[1, 5, 0] = np.nan
    scores = model.predict(points, verbose=0)
    assert np.isnan(scores[1]).all(), scores[1]
    np.testing.assert_allclose(scores[[0, 2]], clean[[0, 2]], rtol=1e-5, atol=1e-6)
    assert np.isfinite(clean).all()
