"""The README's "Usage" model: the script that measures it builds it as
printed, and runs end to end on mock data."""

import json
import os
import re

import keras

from tests.examples.test_scripts import ROOT, example


def _usage_snippet():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme.split("## Usage", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _without_names(config):
    if isinstance(config, dict):
        return {k: _without_names(v) for k, v in config.items() if k != "name"}
    if isinstance(config, list):
        return [_without_names(v) for v in config]
    return config


def _configs(model):
    return [(type(layer).__name__, _without_names(layer.get_config())) for layer in model.layers]


def test_script_builds_the_readme_model_as_printed():
    code = _usage_snippet().replace("model.fit(", "pass  # model.fit(")
    namespace = {}
    exec(code, namespace)
    printed = namespace["model"]
    built = example("readme_usage").readme_model("dynamic")
    assert _configs(printed) == _configs(built)
    assert printed.count_params() == built.count_params()


def test_smoke_run(tmp_path):
    results = example("readme_usage").main(
        ["--smoke", "--routers", "inverted_dot_product", "--output-dir", str(tmp_path)]
    )
    assert [r["router"] for r in results] == ["inverted_dot_product"]
    with open(tmp_path / "readme_usage.json") as f:
        saved = json.load(f)
    assert saved["backend"] == keras.backend.backend() and len(saved["results"]) == 1
    assert all(0.0 <= r["test_accuracy"] <= 1.0 for r in saved["results"])
