"""Every ```python block of README.md and docs/*.md runs as printed.

Each block is a whole program: pasted into a file, it runs on data it makes
(or on files it writes itself) on any backend. The test runs each block on
the current backend (the suite runs once per backend) in fresh globals, as
`__main__`, in an empty working folder, and fails on any exception.

A block that cannot run here says why in an HTML comment on the line right
before its fence, which the rendered page does not show:

    <!-- snippet: skip: needs the internet (a keras-hub preset) -->
    <!-- snippet: backends tensorflow jax: Keras exports a SavedModel from these -->

`skip: REASON` never runs it; `backends NAMES: REASON` runs it on those
backends only. A reason is required. Blocks of other languages (bash, text)
are not run.

A block without a directive runs on one backend per suite run, the same
one each time (by a hash of its place), so the three runs share the blocks
and each stays within the CI time; `ON_EVERY_BACKEND=1` (or
`SNIPPETS_ON_EVERY_BACKEND=1`) runs every block on every backend.
"""

import os
import re
import zlib

import keras
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ("tensorflow", "torch", "jax")

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
_DIRECTIVE = re.compile(r"^<!--\s*snippet:\s*(?P<body>.*?)\s*-->\s*$")
_SKIP = re.compile(r"^skip:\s*(?P<reason>\S.*)$")
_ONLY = re.compile(r"^backends\s+(?P<names>[\w ]+?):\s*(?P<reason>\S.*)$")


def _documents():
    docs = os.path.join(ROOT, "docs")
    names = sorted(n for n in os.listdir(docs) if n.endswith(".md"))
    return ["README.md"] + [os.path.join("docs", n) for n in names]


def parse_directive(body):
    """`(backends, reason)` of a directive's body: backends is None for all,
    () for none (skip). A ValueError for anything else."""
    skip = _SKIP.match(body)
    if skip:
        return (), skip.group("reason")
    only = _ONLY.match(body)
    if only:
        names = tuple(only.group("names").split())
        unknown = [n for n in names if n not in BACKENDS]
        if not names or unknown:
            raise ValueError(f"unknown backends {unknown} in <!-- snippet: {body} -->")
        return names, only.group("reason")
    raise ValueError(
        f"<!-- snippet: {body} --> is neither 'skip: REASON' nor 'backends NAMES: REASON'"
    )


def extract_snippets(text):
    """(line of the fence, code, directive body or None) for each fenced
    block whose language is python; a fence with another py-like language
    (py, python3, pycon) is a ValueError, so no block escapes the test."""
    lines = text.splitlines()
    snippets = []
    number = 0
    while number < len(lines):
        match = _FENCE.match(lines[number])
        if not match:
            number += 1
            continue
        fence, language = match.group(1), match.group(2).lower()
        end = number + 1
        while end < len(lines):
            closing = _FENCE.match(lines[end])
            if closing and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence):
                if not lines[end].strip()[len(closing.group(1)) :].strip():
                    break
            end += 1
        if language == "python":
            previous = lines[number - 1] if number else ""
            directive = _DIRECTIVE.match(previous)
            snippets.append(
                (
                    number + 1,
                    "\n".join(lines[number + 1 : end]) + "\n",
                    directive.group("body") if directive else None,
                )
            )
        elif language.startswith("py"):
            raise ValueError(f"line {number + 1}: fence language {language!r}: write 'python'")
        number = end + 1
    return snippets


def _cases():
    """One case per distinct block: a block printed twice (the README's and
    docs/examples.md's ready model) runs once, under its first place."""
    cases, seen = [], set()
    for path in _documents():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for line, code, directive in extract_snippets(f.read()):
                if (code, directive) in seen:
                    continue
                seen.add((code, directive))
                cases.append(pytest.param(path, line, code, directive, id=f"{path}:{line}"))
    return cases


CASES = _cases()


def test_snippets_found():
    ids = [case.id for case in CASES]
    assert any(i.startswith("README.md:") for i in ids)
    assert sum(i.startswith("docs") for i in ids) >= 10


@pytest.mark.parametrize(("path", "line", "code", "directive"), CASES)
def test_snippet_runs(path, line, code, directive, tmp_path, monkeypatch):
    if directive is not None:
        backends, reason = parse_directive(directive)
        if keras.backend.backend() not in backends:
            pytest.skip(reason)
    elif not (os.environ.get("ON_EVERY_BACKEND") or os.environ.get("SNIPPETS_ON_EVERY_BACKEND")):
        mine = BACKENDS[zlib.crc32(f"{path}:{line}".encode()) % len(BACKENDS)]
        if keras.backend.backend() != mine:
            pytest.skip(f"runs on {mine} (ON_EVERY_BACKEND=1: on every backend)")
    monkeypatch.chdir(tmp_path)
    program = compile(code, f"{path}:{line}", "exec")
    try:
        exec(program, {"__name__": "__main__", "__file__": str(tmp_path / "snippet.py")})
    finally:
        keras.config.set_dtype_policy("float32")
        keras.backend.clear_session()


def test_extraction_and_directives():
    text = "\n".join(
        [
            "```python",
            "a = 1",
            "```",
            "<!-- snippet: skip: needs the internet -->",
            "```python",
            "b = 2",
            "```",
            "````markdown",
            "```python",
            "inside = 'not a block of its own'",
            "```",
            "````",
            "```bash",
            "echo 1",
            "```",
            "<!-- snippet: backends tensorflow jax: SavedModel -->",
            "```python",
            "c = 3",
            "```",
        ]
    )
    assert extract_snippets(text) == [
        (1, "a = 1\n", None),
        (5, "b = 2\n", "skip: needs the internet"),
        (17, "c = 3\n", "backends tensorflow jax: SavedModel"),
    ]
    assert parse_directive("skip: needs the internet") == ((), "needs the internet")
    assert parse_directive("backends tensorflow jax: SavedModel") == (
        ("tensorflow", "jax"),
        "SavedModel",
    )
    for bad in ("skip", "skip:", "backends tensorflow", "backends tf: x", "run: x"):
        with pytest.raises(ValueError):
            parse_directive(bad)
    with pytest.raises(ValueError, match="py3"):
        extract_snippets("```py3\nx = 1\n```\n")


def test_every_directive_is_valid_and_before_a_block():
    for case in CASES:
        _, _, _, directive = case.values
        if directive is not None:
            parse_directive(directive)
    stray = []
    for path in _documents():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            lines = f.read().splitlines()
        for number, line in enumerate(lines):
            if re.match(r"^\s*<!--\s*snippet", line):
                following = lines[number + 1] if number + 1 < len(lines) else ""
                if not _DIRECTIVE.match(line) or following.strip() != "```python":
                    stray.append(f"{path}:{number + 1}: {line}")
    assert not stray, "snippet directives not right before a ```python fence:\n" + "\n".join(stray)
