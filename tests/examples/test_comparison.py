"""examples/comparison.py, the loop of the comparison scripts: every model
trained at one budget from one seed, its row (scores, size, times), one
table on stdout and metrics.json; the shared flags."""

import json

import keras
import numpy as np
import pytest

from tests.examples.test_scripts import example


def tiny_model(width):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(width), keras.layers.Dense(2)])
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def data(count, seed):
    rng = np.random.default_rng(seed)
    return example("comparison").Data(
        rng.normal(size=(count, 4)).astype("float32"), rng.integers(0, 2, count).astype("int32")
    )


@pytest.mark.one_backend
def test_every_model_gets_a_row_a_table_line_and_metrics_json(tmp_path, capsys):
    comparison = example("comparison")
    fits = []

    def counting_fit(model, train, budget):
        fits.append(budget)
        comparison.fit(model, train, budget)

    models = {
        "small": lambda: tiny_model(3),
        "large": comparison.Model(lambda: tiny_model(8), fit=counting_fit),
    }
    results = comparison.compare(
        models,
        train=data(16, 0),
        test={"clean": data(8, 1), "noisy": data(4, 2)},
        budget=comparison.Budget(epochs=2, batch_size=4, steps_per_epoch=1),
        output_dir=str(tmp_path),
        results={"run": "tiny"},
    )
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == json.loads(json.dumps(results))
    assert results["run"] == "tiny" and fits == [comparison.Budget(2, 4, 1)]
    for name, width in (("small", 3), ("large", 8)):
        row = results[name]
        assert row["parameters"] == row["trainable_parameters"] == 4 * width + width + 2 * width + 2
        assert 0 <= row["clean_accuracy"] <= 1 and 0 <= row["noisy_accuracy"] <= 1
        assert row["train_seconds"] >= 0 and row["test_samples_per_second"] > 0
        assert row["train_samples_per_second"] > 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["model", "parameters", "clean", "noisy"]
    assert [line.split()[0] for line in lines[1:]] == ["small", "large"]


@pytest.mark.one_backend
def test_the_same_seed_gives_every_model_the_same_initial_weights(tmp_path):
    comparison = example("comparison")
    initial = []

    def build():
        model = tiny_model(3)
        initial.append(keras.ops.convert_to_numpy(model.weights[0]))
        return model

    comparison.compare(
        {"a": build, "b": build},
        train=data(8, 0),
        test=data(4, 1),
        budget=comparison.Budget(1, 4),
        output_dir=str(tmp_path),
        seed=3,
    )
    np.testing.assert_array_equal(initial[0], initial[1])


def test_the_shared_flags():
    comparison = example("comparison")
    parser = comparison.argument_parser("Title\n\nmore", epochs=3, batch_size=16)
    args = comparison.parse_args(parser, [])
    assert (args.epochs, args.batch_size, args.steps_per_epoch, args.seed) == (3, 16, None, 0)
    assert comparison.Budget.from_args(args) == comparison.Budget(3, 16)
    assert comparison.output_dir(args, "x").endswith(keras.backend.backend())
    with pytest.raises(SystemExit):
        comparison.parse_args(parser, ["--epochs", "0"])
    comparison.add_pretrained_arguments(parser, "a preset")
    assert comparison.learning_rate(comparison.parse_args(parser, [])) == 1e-3
    assert comparison.learning_rate(comparison.parse_args(parser, ["--preset", "p"])) == 5e-5
    frozen = ["--preset", "p", "--freeze-backbone"]
    assert comparison.learning_rate(comparison.parse_args(parser, frozen)) == 1e-3
    parser.add_argument("--lstm-units", type=int, default=4)
    assert comparison.parse_args(parser, [], positive=("lstm_units",)).lstm_units == 4
    with pytest.raises(SystemExit):
        comparison.parse_args(parser, ["--lstm-units", "0"], positive=("lstm_units",))


@pytest.mark.one_backend
def test_a_stopped_run_resumes_from_the_models_it_finished(tmp_path):
    comparison = example("comparison")
    built = []

    def build(width):
        def make():
            built.append(width)
            return tiny_model(width)

        return make

    def run(names, resume, description=None):
        return comparison.compare(
            {name: build(width) for name, width in names.items()},
            train=data(8, 0),
            test=data(4, 1),
            budget=comparison.Budget(1, 4),
            output_dir=str(tmp_path),
            results=description or {"run": "tiny", "epochs": 1},
            resume=resume,
        )

    first = run({"a": 2}, resume=False)  # the run stopped after model "a"
    resumed = run({"a": 2, "b": 3}, resume=True)
    assert built == [2, 3]  # "a" was not trained again
    assert resumed["a"] == first["a"] and resumed["b"]["parameters"] == 4 * 3 + 3 + 2 * 3 + 2
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f) == json.loads(json.dumps(resumed))
    # A subset keeps the other rows in the file; without --resume all train.
    assert run({"b": 3}, resume=True)["a"] == first["a"] and built == [2, 3]
    run({"b": 3}, resume=False)
    assert built == [2, 3, 3]
    with pytest.raises(ValueError, match="another run.*epochs"):
        run({"a": 2}, resume=True, description={"run": "tiny", "epochs": 2})
    parser = comparison.argument_parser("Title", epochs=1, batch_size=4)
    comparison.add_resume_argument(parser)
    assert comparison.parse_args(parser, ["--resume"]).resume
