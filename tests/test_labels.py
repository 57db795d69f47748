"""Labels: class ids in both shapes or one-hot, the same on every backend."""

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules.labels import check_class_ids, one_hot
from tests.test_case import to_numpy

LOSSES = {"margin": kc.MarginLoss, "spread": kc.SpreadLoss}


@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("batch", [4, 3])  # 3: the batch equals the class count
def test_losses_take_ids_in_both_shapes_and_one_hot(loss, batch):
    loss_fn = LOSSES[loss]()
    rng = np.random.default_rng(0)
    scores = rng.uniform(size=(batch, 3)).astype("float32")
    ids = np.arange(batch) % 3
    expected = float(to_numpy(loss_fn(np.eye(3, dtype="float32")[ids], scores)))
    for labels in (ids, ids[:, None], ids.astype("float32")):
        assert float(to_numpy(loss_fn(labels, scores))) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_losses_refuse_other_label_shapes(loss):
    scores = np.full((4, 3), 0.5, "float32")
    for labels in (np.zeros((4, 2)), np.zeros((4, 3, 1)), np.zeros((4, 1, 1))):
        with pytest.raises(ValueError, match=r"y_true.shape=\(4, "):
            LOSSES[loss]()(labels, scores)


def test_ids_out_of_range_are_rows_of_zeros_on_every_backend():
    hot = to_numpy(one_hot(np.array([0, 3, -1, 2]), 3))
    np.testing.assert_array_equal(hot, [[1, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 1]])
    masked = to_numpy(kc.Mask()([np.ones((2, 3, 2), "float32"), np.array([5, 1])]))
    np.testing.assert_array_equal(masked, [[0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0]])


def test_one_class_reads_a_column_label_as_one_hot():
    np.testing.assert_array_equal(to_numpy(one_hot(np.array([[1.0], [0.0]]), 1)), [[1], [0]])


def test_check_class_ids():
    check_class_ids(np.array([0, 2, 1]), 3)
    check_class_ids(np.array([[0], [2]]), 3)
    check_class_ids(np.eye(3)[[0, 2]], 3)  # one-hot
    check_class_ids([0, 7], 3)  # not an array (a list): Keras converts it later
    with pytest.raises(ValueError, match=r"class ids in \[0, 3\). Received: ids from 0 to 3"):
        check_class_ids(np.array([0, 3]), 3)
    with pytest.raises(ValueError, match="from -1 to 1"):
        check_class_ids(np.array([[-1], [1]]), 3)
    with pytest.raises(ValueError, match=r"y.shape=\(2, 2\)"):
        check_class_ids(np.zeros((2, 2)), 3)


def _tiny_capsnet():
    return kc.CapsNet(
        (20, 20, 1),
        3,
        conv_filters=4,
        primary_capsules=2,
        primary_dim=4,
        capsule_dim=4,
        decoder_units=(8,),
    )


def test_ready_models_refuse_ids_out_of_range_in_fit_and_evaluate():
    model = _tiny_capsnet()
    model.compile(optimizer="adam")
    images = np.zeros((4, 20, 20, 1), "float32")
    with pytest.raises(ValueError, match=r"`y` must hold class ids in \[0, 3\)"):
        model.fit(images, np.array([0, 1, 2, 3]), verbose=0)
    with pytest.raises(ValueError, match="validation_data labels"):
        model.fit(
            images,
            np.array([0, 1, 2, 0]),
            verbose=0,
            validation_data=(images, np.array([0, 1, 2, 9])),
        )
    with pytest.raises(ValueError, match=r"`y` must hold class ids"):
        model.evaluate(images, np.array([-1, 0, 0, 0]), verbose=0)
    history = model.fit(images, np.array([[0], [1], [2], [0]]), verbose=0)  # (batch, 1) ids
    assert np.isfinite(history.history["loss"][0])


def test_matrix_capsnet_refuses_ids_out_of_range():
    model = kc.MatrixCapsNet(
        conv_filters=4,
        primary_capsules=2,
        conv_capsules1=2,
        conv_capsules2=2,
        router={"class_name": "em", "config": {"iterations": 1}},
    )
    with pytest.raises(ValueError, match=r"class ids in \[0, 5\)"):
        model.fit(np.zeros((2, 32, 32, 2), "float32"), np.array([0, 5]), verbose=0)


def test_compiled_margin_loss_takes_ids_in_fit():
    x = np.random.default_rng(0).normal(size=(8, 4, 3)).astype("float32")
    losses = []
    for labels in (np.arange(8) % 3, (np.arange(8) % 3)[:, None], np.eye(3)[np.arange(8) % 3]):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((4, 3))
        model = keras.Model(inputs, kc.Length()(kc.Capsule(3, 4)(inputs)))
        model.compile(optimizer="adam", loss=kc.MarginLoss())
        losses.append(model.fit(x, labels, verbose=0).history["loss"][0])
    np.testing.assert_allclose(losses, losses[0], rtol=1e-5)
