"""The files of a released package: the license, and the pre-commit hooks
pinned to the ruff that CI runs. Pure Python: no Keras, no network."""

import hashlib
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# sha256 of the Apache License 2.0 text as the ASF publishes it
# (https://www.apache.org/licenses/LICENSE-2.0.txt), appendix included.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def _read_bytes(name):
    with open(os.path.join(ROOT, name), "rb") as f:
        return f.read()


def _pyproject():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in Python >= 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_license_is_the_apache_2_0_text():
    data = _read_bytes("LICENSE")
    text = data.decode("utf-8")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines[:3] == [
        "Apache License",
        "Version 2.0, January 2004",
        "http://www.apache.org/licenses/",
    ], lines[:3]
    assert "APPENDIX: How to apply the Apache License to your work." in lines
    assert lines[-1] == "limitations under the License."
    assert hashlib.sha256(data).hexdigest() == APACHE_2_0_SHA256


def test_pyproject_declares_the_license_and_its_file():
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]


def test_pre_commit_runs_the_pinned_ruff():
    (pin,) = [
        req for req in _pyproject()["project"]["optional-dependencies"]["lint"] if "ruff" in req
    ]
    version = re.fullmatch(r"ruff==(\S+)", pin)
    assert version, f"the lint extra should pin ruff exactly, not {pin!r}"
    config = _read_bytes(".pre-commit-config.yaml").decode("utf-8")
    repo = re.search(
        r"^\s*-\s*repo:\s*https://github\.com/astral-sh/ruff-pre-commit\s*\n"
        r"\s*rev:\s*['\"]?(?P<rev>[^'\"\s]+)['\"]?\s*\n"
        r"\s*hooks:\s*\n(?P<hooks>(?:\s*-\s*id:.*\n?)+)",
        config,
        re.MULTILINE,
    )
    assert repo, "no astral-sh/ruff-pre-commit repo with its rev and hooks"
    assert repo["rev"] == f"v{version[1]}"
    assert re.findall(r"id:\s*(\S+)", repo["hooks"]) == ["ruff-check", "ruff-format"]
