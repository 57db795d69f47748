"""callbacks.CapsuleMonitor: every routed layer measured at the end of each
epoch, in the logs (History, CSVLogger), as capsule_statistics gives them
for the trained weights; its figures; its arguments."""

import csv

import keras
import numpy as np
import pytest

import keras_capsules as kc
from keras_capsules import diagnostics
from keras_capsules.callbacks import MONITORED, CapsuleMonitor


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 4))
    parts = kc.Capsule(4, 5, name="parts")(inputs)
    classes = kc.Capsule(3, 5, name="classes")(parts)
    model = keras.Model(inputs, kc.Length()(classes))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=kc.MarginLoss())
    return model


def _data():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 16)
    x = rng.normal(size=(16, 6, 4)).astype("float32") + labels[:, None, None]
    return x, labels


def test_logs_every_layer_as_capsule_statistics_gives_it_after_training(tmp_path):
    model = _model()
    x, labels = _data()
    monitor = CapsuleMonitor(x, labels)
    logger = keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))
    history = model.fit(
        x, np.eye(3)[labels], epochs=3, batch_size=8, callbacks=[monitor, logger], verbose=0
    ).history
    after = diagnostics.capsule_statistics(model, x, labels)
    assert sorted(monitor.history) == [0, 1, 2]
    for layer in ("parts", "classes"):
        for measure in MONITORED:
            key = f"capsules/{layer}/{measure}"
            assert len(history[key]) == 3, key
            # The last epoch's measures are those of the trained weights.
            np.testing.assert_allclose(history[key][-1], after[layer][measure], rtol=1e-5)
    with open(tmp_path / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and "capsules/parts/starved_fraction" in rows[0]
    # Training changes what is measured.
    first, last = monitor.history[0]["classes"], monitor.history[2]["classes"]
    assert first["coefficient_entropy"] != last["coefficient_entropy"]


def test_every_other_epoch_and_the_figures(tmp_path):
    model = _model()
    x, labels = _data()
    path = tmp_path / "capsules.png"
    monitor = CapsuleMonitor(x, every=2, figure_path=str(path))
    model.fit(x, np.eye(3)[labels], epochs=4, batch_size=8, callbacks=[monitor], verbose=0)
    assert sorted(monitor.history) == [0, 2, 3]  # the last epoch too
    assert path.stat().st_size > 0 and (tmp_path / "capsules_routing.png").stat().st_size > 0
    assert [ax.get_title() for ax in monitor.figure().axes][:2] == [
        "starved fraction",
        "coefficient entropy",
    ]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"threshold": 0}, "threshold"),
        ({"every": 0}, "every"),
        ({"iteration_change": "yes"}, "iteration_change"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CapsuleMonitor(np.zeros((2, 6, 4)), **kwargs)


def test_routing_images_and_coefficient_change_in_tensorboard(tmp_path):
    """`log_dir`: each measured epoch writes every routed layer's mean
    coefficients as an image (`routing/<layer>`, run `capsules`), the
    image `routing_image` makes of them; `iteration_change=True` logs
    `coefficient_change` beside the other measures."""
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    from keras_capsules.callbacks import routing_image

    model = _model()
    x, labels = _data()
    monitor = CapsuleMonitor(x, labels, iteration_change=True, log_dir=tmp_path)
    history = model.fit(
        x, np.eye(3)[labels], epochs=2, batch_size=8, callbacks=[monitor], verbose=0
    ).history
    assert len(history["capsules/classes/coefficient_change"]) == 2
    assert 0 <= history["capsules/classes/coefficient_change"][-1] <= 1
    images = {}
    for path in (tmp_path / "capsules").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                width, height, png = value.tensor.string_val[:3]
                pixels = tf.io.decode_png(png).numpy()
                assert (int(width), int(height)) == pixels.shape[1::-1]
                images[(value.tag, event.step)] = pixels
    assert sorted(images) == [(f"routing/{layer}", step) for layer in ("classes", "parts")
                              for step in (0, 1)]  # fmt: skip
    # The last image is the trained model's coefficients.
    c = diagnostics.routing_coefficients(model, x)["classes"]
    np.testing.assert_array_equal(images[("routing/classes", 1)], routing_image(c))
    assert routing_image(c).shape == (4, 3 * 8, 1) and routing_image(c).max() == 255


def test_a_subclassed_model_is_refused_when_training_starts():
    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return self.dense(x)

    model = Sub()
    model.compile(optimizer="adam", loss="mse")
    with pytest.raises(ValueError, match="functional and built Sequential"):
        model.fit(np.zeros((2, 4)), np.zeros((2, 3)), callbacks=[CapsuleMonitor(np.zeros((2, 4)))])
