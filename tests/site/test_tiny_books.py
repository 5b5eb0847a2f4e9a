"""Tiny books with the project's _config.yml: a failing chapter fails the build and is reported
at the end, the conventions sample and the CONTRIBUTING.md snippets build warning-free, and the
output poller's patch is quiet only when its channel was closed."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bookutils import ROOT
from sitebuild import build

pytestmark = pytest.mark.book
DATA = Path(__file__).parent / "data"
NOTEBOOK_HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


def tiny_book(folder: Path, page: str, docname: str = "page", timeout: int | None = None,
              chapters: dict[str, str] | None = None) -> Path:
    """A one-page book in ``folder`` with the project's _config.yml (and its extension) and
    ``page`` as its root document ``docname``; ``timeout`` replaces the per-cell timeout;
    ``chapters`` (docname: text) are further pages, listed in the toc after the root."""
    folder.mkdir(parents=True)
    config = (ROOT / "_config.yml").read_text()
    if timeout is not None:
        config, count = re.subn(r"^(  timeout:) \d+", rf"\1 {timeout}", config, flags=re.M)
        assert count == 1, "_config.yml has no `execute: timeout:` line"
    (folder / "_config.yml").write_text(config)
    shutil.copy(ROOT / "references.bib", folder / "references.bib")
    for name in ("_vendor", "_ext"):
        (folder / name).symlink_to(ROOT / name)
    toc = f"format: jb-book\nroot: {docname}\n"
    if chapters:
        toc += "chapters:\n" + "".join(f"- file: {name}\n" for name in chapters)
    (folder / "_toc.yml").write_text(toc)
    for name, text in {docname: page, **(chapters or {})}.items():
        (folder / f"{name}.md").parent.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.md").write_text(text)
    return folder


# Three ways a chapter fails: a cell raises, a check's assertion fails, a cell exceeds the timeout.
FAILING_CELLS = {
    "raises": ("```{code-cell} ipython3\nvalues = [1.0, 2.0]\n"
               "raise ValueError(f\"injected failure after {len(values)} values\")\n```\n",
               "ValueError: injected failure after 2 values"),
    "check": ("```{code-cell} ipython3\n:tags: [check]\nmargin = 0.5\n"
              "assert margin >= 1, f\"margin = {margin:.2f} < 1\"\n```\n",
              "AssertionError: margin = 0.50 < 1"),
    "timeout": ("```{code-cell} ipython3\nimport time\n\ntime.sleep(60)  # longer than the timeout\n"
                "```\n", "timed out after 10 s in cell 2 of chapter"),
}


@pytest.mark.parametrize("kind", FAILING_CELLS)
def test_failing_chapter_is_reported(kind, tmp_path, vendor):
    """The build of a chapter with a failing cell, a failing check or a cell over the timeout
    exits non-zero and ends with the chapter, the cell's source and the error, which it also
    writes to _build/html/reports/ (where chapters/appendix-running.md says)."""
    cell, error = FAILING_CELLS[kind]
    docname = f"chapters/09-failing-{kind}"
    page = NOTEBOOK_HEADER + f"\n# Failing ({kind})\n\n```{{code-cell}} ipython3\nx = 1\n```\n\n" + cell
    book = tiny_book(tmp_path / "book", page, docname=docname,
                     timeout=10 if kind == "timeout" else None)  # x = 1 cannot take 10 s
    result = build(book)
    assert result.rc != 0, f"the build of a chapter whose cell {kind} succeeded"
    tail = "\n".join(result.output.splitlines()[-20:])
    assert f"{docname}.md" in tail, f"the last 20 lines do not name the chapter:\n{tail}"
    assert error in tail, f"the last 20 lines do not give the error {error!r}:\n{tail}"
    end = result.output[result.output.rfind("a chapter failed to execute"):]
    first_line = cell.splitlines()[2 if kind == "check" else 1]
    assert first_line in end, f"the summary does not show the cell's source:\n{end}"
    if kind != "timeout":
        assert "Traceback" in end and "Cell In[2]" in end, f"no kernel traceback:\n{end}"
    report = book / "_build" / "html" / "reports" / f"{docname}.err.log"
    assert report.is_file(), f"no report at {report.relative_to(book)}"
    text = report.read_text()
    assert f"{docname}.md" in text and first_line in text and error in text, text
    assert "\x1b[" not in text, "the report keeps terminal colour codes"
    if kind == "raises":
        lenient = build(book, args=[])
        assert lenient.rc != 0, "without -W a failing chapter must still fail the build"


def test_every_failing_chapter_is_reported_and_a_timeout_reads_as_one(tmp_path, vendor):
    """Two failing chapters in one build: both are named at the end, each once. The first times
    out while it is printing, which used to add a second traceback before the summary (nbclient's
    output poller reading a closed kernel socket: "Task exception was never retrieved" with a
    ZMQError, or an AssertionError on IPC sockets); the timeout now reads as a timeout only."""
    printing = ("```{code-cell} ipython3\nimport sys\nimport time\n\nfor k in range(10**6):\n"
                "    print(k, flush=True)\n    sys.stderr.write(\"e\\n\")\n    time.sleep(0.001)\n```\n")
    raising = "```{code-cell} ipython3\nraise RuntimeError(\"second failure\")\n```\n"
    chapters = {f"chapters/0{k}-failing": NOTEBOOK_HEADER + f"\n# Failing {k}\n\n"
                "```{code-cell} ipython3\nx = 1\n```\n\n" + cell
                for k, cell in ((1, printing), (2, raising))}
    book = tiny_book(tmp_path / "book", "# Root\n\nA page without code.\n", docname="intro",
                     timeout=10, chapters=chapters)
    result = build(book)
    assert result.rc != 0, "a build with two failing chapters succeeded"
    closing = result.output[result.output.rfind("2 chapters failed to execute"):]
    assert "FAILED chapters/01-failing.md" in closing and "FAILED chapters/02-failing.md" in closing, \
        f"the closing lines do not name both chapters:\n{closing}"
    assert "timed out after 10 s in cell 2 of chapter chapters/01-failing.md" in closing, closing
    assert "RuntimeError: second failure" in closing, closing
    before = result.output[:result.output.find("a chapter failed to execute")]
    noise = [line for line in before.splitlines()
             if re.search(r"Traceback|ZMQError|Task exception was never retrieved|AssertionError", line)]
    assert not noise, "the log has a traceback before the summary:\n" + "\n".join(noise)


def test_conventions_sample_builds(tmp_path, vendor):
    """The CONTRIBUTING.md conventions (tests/site/data/sample_chapter.md) build warning-free."""
    result = build(tiny_book(tmp_path / "book", (DATA / "sample_chapter.md").read_text()))
    assert result.rc == 0 and not result.warnings(), \
        "\n".join(result.warnings()) or result.output[-5000:]


def contributing_page() -> str:
    """The ````md snippets of CONTRIBUTING.md in order, as one page ({doc} and {ref} links to
    pages of the book unlinked)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    page = "\n\n".join(re.findall(r"^````md\n(.*?)^````$", text, re.S | re.M))
    return re.sub(r"\{(?:doc|ref)\}`([^`]+)`", r"`\1`", page)


def test_contributing_snippets_build(tmp_path, vendor):
    """The snippets of CONTRIBUTING.md run against the library and build warning-free."""
    page = contributing_page()
    assert page.startswith("---\njupytext:"), "the first snippet must be the chapter header"
    result = build(tiny_book(tmp_path / "book", page))
    assert result.rc == 0 and not result.warnings(), \
        "\n".join(result.warnings()) or result.output[-5000:]




EQUATIONS_PAGE = r"""# Equations

$$a = 1$$ (eq-first)

\begin{equation}
b = 2
\end{equation}

\begin{equation*}
s = 2
\end{equation*}

\begin{align}
c &= 3 \\
d &= 4
\end{align}

A paragraph
$$ z = 3 $$ (eq-not-an-equation)

\begin{pmatrix}
a & b
\end{pmatrix}

$$
e = 5
$$ (eq-second)

- in a list

  $$ f = 6 $$ (eq-third)

See {eq}`eq-first`, {eq}`eq-second` and {eq}`eq-third`.
"""


def test_equation_numbers_of_the_index_match_the_site(tmp_path, vendor):
    """The equation numbers scripts/bookindex.py gives (the exported notebooks' \\tag and
    {eq} text) are the ones Sphinx prints. Bug caught (found by an independent review): an
    unlabelled unstarred amsmath environment, which Sphinx numbers, not counted, so every
    later equation of the page was one short in the notebooks."""
    from bookindex import BookIndex

    book = tiny_book(tmp_path / "book", EQUATIONS_PAGE)
    result = build(book)
    assert result.rc == 0, result.output[-3000:]
    html = (result.html / "page.html").read_text()
    site = dict(re.findall(r'href="#equation-([\w-]+)">\((\d+)\)</a>', html))
    assert set(site) == {"eq-first", "eq-second", "eq-third"}, site
    index = BookIndex(book)
    assert {label: index.labels[label].number for label in site} == site
