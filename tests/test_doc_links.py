"""Relative links in the repository's Markdown files lead somewhere.

For every Markdown file (README.md, CONTRIBUTING.md, CHANGELOG.md, docs/,
benchmarks/, ...)
each relative link `[text](path)`, `[text](path#anchor)` or `[text](#anchor)`
outside fenced code blocks and code spans must name a file or folder that
exists relative to the Markdown file, and an anchor into a Markdown file must
be the GitHub slug of one of its headings. Pure Python: no Keras, no network.
"""

import functools
import os
import re
import urllib.parse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Folders that hold no documentation of the project: environments, build
# outputs, caches and the example scripts' run folders.
_SKIP_DIRS = {"build", "dist", "runs", "node_modules", "__pycache__"}


def _markdown_files():
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d not in _SKIP_DIRS and not d.endswith(".egg-info")
        )
        for name in sorted(filenames):
            if name.lower().endswith(".md"):
                found.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    return found


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)
# [text](target) or [text](target "title"); the text may hold one level of
# brackets (`[a [b] c](x)`), the target may be wrapped in <...>.
_LINK = re.compile(
    r"!?\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"\(\s*(?P<target><[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _lines_outside_fences(text):
    """Yield (line number, line) for the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
            if not line.strip()[len(match.group(1)) :].strip():
                fence = None


def _blank_code_spans(line):
    """The line with each code span's content replaced by 'x's (same length)."""
    return _CODE_SPAN.sub(lambda m: m.group(1) + "x" * len(m.group(2)) + m.group(1), line)


def _heading_text(raw):
    """A heading's text as GitHub renders it: no links' targets, no markup."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "")
    return text


def github_slug(heading):
    """The anchor GitHub gives a heading (before de-duplication)."""
    slug = _heading_text(heading).strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


def _anchors(text):
    """Every anchor of a Markdown text: its headings' slugs, -1, -2 suffixed
    for repeats, and explicit `<a name=...>` / `id=...` anchors."""
    headings = []
    previous = None
    for _, line in _lines_outside_fences(text):
        atx = _ATX.match(line)
        if atx:
            headings.append(atx.group(2) or "")
            previous = None
            continue
        if previous is not None and previous.strip() and _SETEXT.match(line):
            prev = previous.strip()
            if not (prev.startswith(("-", "*", "+", ">", "|")) or _ATX.match(previous)):
                headings.append(prev)
                previous = None
                continue
        previous = line
    anchors = set()
    counts = {}
    for heading in headings:
        slug = github_slug(heading)
        if slug in counts:
            counts[slug] += 1
            anchors.add(f"{slug}-{counts[slug]}")
        else:
            counts[slug] = 0
            anchors.add(slug)
    anchors.update(_HTML_ANCHOR.findall(text))
    return anchors


@functools.cache
def _anchors_of(path):
    with open(path, encoding="utf-8") as f:
        return _anchors(f.read())


def _paragraphs(text):
    """Yield (first line number, text) for each run of non-blank lines
    outside fenced code blocks: a link's text may wrap onto the next line."""
    lines, first, last = [], None, None
    for number, line in _lines_outside_fences(text):
        if line.strip() and (last is None or number == last + 1):
            if not lines:
                first = number
            lines.append(line)
            last = number
            continue
        if lines:
            yield first, "\n".join(lines)
        lines, first, last = ([line], number, number) if line.strip() else ([], None, None)
    if lines:
        yield first, "\n".join(lines)


def _links(text):
    """Yield (line number, target) for the relative links of a Markdown text."""
    for first, paragraph in _paragraphs(text):
        paragraph = _blank_code_spans(paragraph)
        for match in _LINK.finditer(paragraph):
            target = match.group("target").strip("<>")
            if not target or _SCHEME.match(target) or target.startswith("//"):
                continue  # http(s)://, mailto:, ... and protocol-relative URLs
            yield first + paragraph.count("\n", 0, match.start("target")), target


def broken_links(md_path):
    """(line number, link, reason) for each broken relative link of a file."""
    with open(md_path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    for number, link in _links(text):
        path, _, anchor = link.partition("#")
        path = urllib.parse.unquote(path.split("?", 1)[0])
        anchor = urllib.parse.unquote(anchor)
        if path:
            base = ROOT if path.startswith("/") else os.path.dirname(md_path)
            target = os.path.normpath(os.path.join(base, path.lstrip("/")))
            if not os.path.exists(target):
                problems.append(
                    (number, link, f"no such file or folder: {os.path.relpath(target, ROOT)}")
                )
                continue
        else:
            target = md_path
        if anchor and os.path.isfile(target) and target.lower().endswith(".md"):
            if anchor not in _anchors_of(target):
                problems.append(
                    (
                        number,
                        link,
                        f"no heading with slug '{anchor}' in {os.path.relpath(target, ROOT)}",
                    )
                )
    return problems


MARKDOWN_FILES = _markdown_files()


def test_markdown_files_found():
    assert "README.md" in MARKDOWN_FILES
    assert "CONTRIBUTING.md" in MARKDOWN_FILES
    assert any(p.startswith("docs" + os.sep) for p in MARKDOWN_FILES)


@pytest.mark.parametrize("md_file", MARKDOWN_FILES)
def test_relative_links_resolve(md_file):
    problems = broken_links(os.path.join(ROOT, md_file))
    assert not problems, f"{len(problems)} broken link(s):\n" + "\n".join(
        f"  {md_file}:{number}: ({link}) {reason}" for number, link, reason in problems
    )


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Quick start", "quick-start"),
        ("Recomputing the routing (`remat=True`)", "recomputing-the-routing-remattrue"),
        ("Segmentation: SegCaps and a U-Net", "segmentation-segcaps-and-a-u-net"),
        ("The Usage model, with each router", "the-usage-model-with-each-router"),
        ("snake_case and 0.2.0", "snake_case-and-020"),
        ("  Padded  ", "padded"),
        ("[A link](other.md) here", "a-link-here"),
    ],
)
def test_github_slug(heading, slug):
    assert github_slug(heading) == slug


def test_link_parsing():
    text = "\n".join(
        [
            "# Title",
            "## Title",
            "[a](#title-1) [b](x.md#y) ![img](images/p.png) [c](https://e.org) [d](mailto:a@b)",
            "`[not](a-link.md)` [`code` text](z.md) [wrapped",
            "text](w.md#a) ``[a ` b](c.md)``",
            "```",
            "[inside](fence.md)",
            "```",
            "Setext",
            "------",
        ]
    )
    assert list(_links(text)) == [
        (3, "#title-1"),
        (3, "x.md#y"),
        (3, "images/p.png"),
        (4, "z.md"),
        (5, "w.md#a"),
    ]
    assert _anchors(text) == {"title", "title-1", "setext"}
