"""The MyST-to-Markdown conversion on a small book that uses every construct it supports
(tests/notebooks/data/minibook), against Markdown written out by hand."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import export
from bookutils import ROOT, read_notebook
from residue import residue

MINI = Path(__file__).parent / "data" / "minibook"
VALUES = {"01-x": "0.123456", "01-n": "12345"}


def convert(doc: str, values: dict) -> nbformat.NotebookNode:
    return export.plain_notebook(read_notebook(MINI / f"{doc}.md"), doc, values, root=MINI)


def markdown(nb) -> str:
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


@pytest.fixture(scope="module")
def first():
    return convert("chapters/01-first", VALUES)


def test_cells_keep_order_type_metadata_and_code(first):
    """Code cells are never merged, split or edited, and keep their metadata (the course
    packs add nbgrader metadata before converting), but for the glue cells, left out, and the
    folds: a solution's code and a check's (hide-input) gain what collapses them."""
    source = read_notebook(MINI / "chapters/01-first.md")
    code_in = [(c.source, c.metadata) for c in source.cells if c.cell_type == "code"
               and "glue" not in c.metadata.get("tags", [])]
    code_out = [(c.source, c.metadata) for c in first.cells if c.cell_type == "code"]
    # what collapses a cell's code (JupyterLab, Notebook 7, VS Code; Colab)
    fold = {"jupyter": {"source_hidden": True}, "cellView": "form"}
    solution = {"export": {"solution": "ex-01-compute"}, **fold}
    check = {"tags": ["check", "hide-input"], **fold}
    assert code_out == [(s, solution if s == "def f():\n    return 1" else
                         check if "check" in m.get("tags", []) else m) for s, m in code_in]
    assert not any("glue" in s for s, _ in code_out), "a glue cell was exported"
    tagged = source.cells[1]
    tagged.metadata["nbgrader"] = {"grade": True, "points": 2}
    out = export.plain_notebook(source, "chapters/01-first", VALUES, root=MINI)
    assert out.cells[1].metadata["nbgrader"] == {"grade": True, "points": 2}
    assert source.cells[0].source.startswith("# The first chapter\n\n:::{admonition}"), \
        "the input notebook must not be modified"


def test_every_construct_becomes_plain_markdown(first):
    text = markdown(first)
    expected = [
        # admonition: a bold title and a blockquote; {doc} a link to the page (no site here:
        # its source in the repository), never a sibling notebook that a download lacks;
        # {ref} to a page that is not a notebook: its source in the repository, at the heading
        "**In this chapter**\n\n> - **Prerequisites** [The second chapter]"
        "(https://github.com/example/minibook/blob/trunk/chapters/02-second.md), "
        "[the times](https://github.com/example/minibook/blob/trunk/chapters/appendix-notes.md"
        "#times-of-the-chapters).",
        # citations: author-year labels, two 2020 papers of Smith et al. kept apart
        "> - **Paper** [Smith et al. 2020a], and [Smith et al. 2020b; Lone 2019].",
        # numbered box, per-chapter numbering; labelled equation -> \tag, math on one line
        "**Definition 1.1 (A thing).**\n\n> A thing is $x$ with\n>\n> $$x = 1 \\tag{1.1}$$",
        # :nonumber: box; {prf:ref} without text: kind, number and title; inline math joined
        "**Theorem (Big result).**\n\n> Under Definition 1.1 (A thing), $x$ is\n> $a + b$.",
        "**Proof.**\n\n> Obvious from (1.1).\n>\n> ∎",
        "**Remark 1.1 (On things).**\n\n> See the big result.",
        # glue formats as myst-nb applies them; {cite:t}; {math}
        "The value is 0.123, the count 12,345, raw 0.123456;\nLone [2019] showed it; "
        "$\\alpha$ is inline.",
        "**Fig. 1.1.** A figure with $x$.",
        "Fig. 1.1 and Figure 1.1 show it; see [Definitions](#Definitions).",
        "**Warning**\n\n> Careful with (1.1).",
        "**More**\n\n> Hidden text.",
        "### Exercise 1.1: Compute it\n\nWrite `f`.",
        # the solution folded away, as the site's closed dropdown
        "#### Solution to Exercise 1.1\n\n<details>\n<summary>Show the solution</summary>\n\n"
        "Return one.\n\n</details>",
        "```python\n# a plain code block keeps its {doc}`syntax`\n```",
        "## References\n\n- **[Smith et al. 2020a]** Ann Smith, Bob Jones, Cy Lee. *A First "
        "Paper*. Proceedings of Something, 2020. <https://example.org/first>\n"
        "- **[Smith et al. 2020b]** Ann Smith, Dee Park, Eve Kim. *A Second Paper*. "
        "arXiv:2001.00001, 2020.\n- **[Lone 2019]** Al Lone. *Alone*. Journal of Tests, 2019.",
    ]
    for piece in expected:
        assert piece in text, f"missing from the export:\n{piece}\n--- export:\n{text}"
    assert "a comment the reader never sees" not in text
    assert "(sec-first-def)=" not in text
    assert residue(text) == []
    assert first.cells[-1].metadata["export"] == {"references": True}


def test_glue_formats_match_python_format():
    """myst-nb formats the glued text/plain with format(value, spec): so must the export."""
    for text, spec, value in [("0.123456", ".3f", 0.123456), ("12345", ",d", 12345),
                              ("2.5e-07", ".2e", 2.5e-07), ("0.9506866084794551", ".4f",
                                                            0.9506866084794551),
                              ("'abc'", "s", "abc"), ("7", ".1%", 7)]:
        assert export.format_glue(text, spec) == format(value, spec)


def test_references_across_pages_link_the_page_not_a_sibling_notebook():
    """A notebook is often downloaded alone: links to other pages go to the page (here, with
    no site, its source), to a sibling notebook only when the caller says it lies beside (a
    course pack). Bug caught: every export linked the sibling notebook of the first page, dead
    in a download."""
    text = markdown(convert("chapters/02-second",
                            {"chapters/01-first::01-x": "0.123456"}))
    first = "https://github.com/example/minibook/blob/trunk/chapters/01-first.md"
    assert (f"As [Definition 1.1 (A thing)]({first}) in [The first chapter]"
            f"({first}) and [(1.1)]({first}) there; [Fig. 1.1]({first})."
            "\nQuoted: 0.12.") in text
    assert "**Definition 2.1 (Other).**" in text
    intro = markdown(convert("intro", {}))
    assert (f"Start with [The first chapter]({first}), or [the second one]"
            "(https://github.com/example/minibook/blob/trunk/chapters/02-second.md).") in intro
    assert ".ipynb" not in text + intro
    mapped = markdown(export.plain_notebook(
        read_notebook(MINI / "intro.md"), "intro", {}, root=MINI,
        notebook_dir_map={"chapters/01-first": "pack/first.ipynb"}))
    assert "[The first chapter](pack/first.ipynb)" in mapped
    assert "[the second one](https://github.com/example/minibook/blob/trunk/chapters/" \
           "02-second.md)" in mapped, "a page outside the map links to its source"


@pytest.mark.parametrize("bad, message", [
    ("```{unknown-directive}\nx\n```", "{unknown-directive}"),
    ("{glue:text}`missing-key:.2f`", "'missing-key'"),
    ("{prf:ref}`no-such-label`", "'no-such-label'"),
    ("{doc}`no-such-page`", "'chapters/no-such-page'"),
    ("{cite}`nobody2000`", "nobody2000"),
    ("{unknownrole}`x`", "{unknownrole}"),
])
def test_unknown_constructs_fail_loudly(bad, message):
    """Never a silent MyST leftover: an unsupported construct or a missing value is a
    ValueError that names it and the page."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(bad)])
    with pytest.raises(ValueError, match=r"chapters/01-first: cannot export .*") as info:
        export.plain_notebook(nb, "chapters/01-first", VALUES, root=MINI)
    assert message in str(info.value)


# ----------------------------------------------------------------------------- install cell

class FakeShell:
    """Records the %pip lines an install cell runs, expanded as IPython expands them."""

    def __init__(self):
        self.lines = []

    def run_line_magic(self, name, line):
        scope = sys._getframe(1).f_locals
        self.lines.append(f"%{name} " + line.format(**scope))


def run_install_cell(monkeypatch, *, installed: bool, colab: bool, platform: str,
                     present=("numpy", "scipy", "torch", "matplotlib", "ipywidgets", "numba",
                              "llvmlite")):
    from IPython.core.inputtransformer2 import TransformerManager

    cell = export.install_cell(export.read_config(ROOT))
    code = TransformerManager().transform_cell(cell.source)
    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "maxmargin":
            return object() if installed else None
        if name in export.COLAB_MODULES.values():
            return object() if name in present else None
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(sys, "platform", platform)
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", object())
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    shell = FakeShell()
    exec(code, {"get_ipython": lambda: shell})
    return shell.lines


def test_install_cell_is_guarded(monkeypatch):
    """Inside the repository or Binder (library importable) the cell installs nothing."""
    assert run_install_cell(monkeypatch, installed=True, colab=False, platform="linux") == []
    assert run_install_cell(monkeypatch, installed=True, colab=True, platform="linux") == []


def test_install_cell_on_linux_takes_the_cpu_wheel_first(monkeypatch):
    config = export.read_config(ROOT)
    spec = f'"maxmargin[book] @ git+{config["repo_url"]}@{config["branch"]}"'
    # every pin a reader's notebook runs on, none of the site's or the tests' (constraints.txt)
    exact = " ".join(f"{name}=={version}" for name, version in config["pins"].items())
    assert "numpy==" in exact and "llvmlite==" in exact
    # the notebooks glue nothing (their glue cells are left out): no myst-nb, no Sphinx with it
    assert "myst-nb" not in exact
    assert "sphinx" not in exact and "pytest" not in exact and "jupyterlab" not in exact
    lines = run_install_cell(monkeypatch, installed=False, colab=False, platform="linux")
    assert lines == [
        f'%pip install -q torch=={config["pins"]["torch"]} --index-url '
        "https://download.pytorch.org/whl/cpu",
        f"%pip install -q {spec} {exact}"]
    assert run_install_cell(monkeypatch, installed=False, colab=False,
                            platform="darwin") == [f"%pip install -q {spec} {exact}"]


def test_install_cell_on_colab_keeps_colab_packages(monkeypatch):
    """Colab: the library without dependencies, then only the missing ones at our pins."""
    config = export.read_config(ROOT)
    lines = run_install_cell(monkeypatch, installed=False, colab=True, platform="linux")
    pins = config["pins"]
    assert lines[0] == (f'%pip install -q --no-deps "maxmargin[book] @ git+{config["repo_url"]}'
                        f'@{config["branch"]}"')
    assert lines[1] == ("%pip install -q " + " ".join(
        f"{name}=={pins[name]}" for name in pins
        if name in ("cvxpy", "clarabel", "jupytext")))
    assert "myst" not in lines[1]
    assert "torch" not in lines[1] and "numpy" not in lines[1]


def test_install_cell_reads_the_repository_url_from_config():
    """The URL is the one of _config.yml (set once there), the pins those of constraints.txt."""
    import yaml

    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    source = export.install_cell(export.read_config(ROOT)).source
    assert f"git+{url}@" in source
    torch = next(line for line in (ROOT / "constraints.txt").read_text().splitlines()
                 if line.startswith("torch=="))
    assert f" {torch} " in source


def test_make_notebooks_writes_valid_notebooks(tmp_path):
    """The command line on the landing page (the smallest notebook page): one install cell
    first, no outputs, no MyST, valid nbformat."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_notebooks.py"), str(tmp_path),
                    str(ROOT / "intro.md")], check=True, capture_output=True, text=True)
    nb = nbformat.read(tmp_path / "intro.ipynb", as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].metadata["export"] == {"install": True}, "the install cell comes first"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), \
        "the title stays the first thing a reader sees"
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert residue(markdown(nb)) == []


def test_nested_directives_and_code_blocks():
    """Fences nest: a note inside an admonition, a code block inside a remark."""
    source = ("::::{admonition} Outer\n:::{note}\nInner {eq}`eq-thing`.\n:::\nAfter.\n::::\n\n"
              "````{prf:remark} With code\n```python\nx = 1\n```\nDone.\n````")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(source)])
    text = markdown(export.plain_notebook(nb, "chapters/01-first", VALUES, root=MINI))
    assert text == ("**Outer**\n\n> **Note**\n>\n> > Inner (1.1).\n>\n> After.\n\n"
                    "**Remark (With code).**\n\n> ```python\n> x = 1\n> ```\n> Done.")


def test_blocks_inside_list_items_and_quotes_stay_there():
    """A note in a list item, a labelled equation in a numbered step and one in a quote are
    exported in place, with the item's indentation or the quote's `>`. Bug caught: the
    exported block dropped at the left margin (it ends the list, or leaves the quote)."""
    source = ("- an item\n\n  ```{note}\n  Inside the item.\n  ```\n- next item\n\n"
              "1. step\n\n   $$\n   a = b\n   $$ (eq-thing)\n\n"
              "> quoted\n>\n> $$ q = 1 $$ (eq-thing)\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(source)])
    text = markdown(export.plain_notebook(nb, "chapters/01-first", VALUES, root=MINI))
    assert text == ("- an item\n\n  **Note**\n\n  > Inside the item.\n\n- next item\n\n"
                    "1. step\n\n   $$\n   a = b\n   \\tag{1.1}\n   $$\n\n"
                    "> quoted\n>\n> $$\n> q = 1\n> \\tag{1.1}\n> $$")


def test_site_links_substitutions_and_links_to_page_sources(tmp_path):
    """With ``html: baseurl`` set, pages without a notebook are linked on the site (a {ref}
    to a section at its label, an id Sphinx always writes: a title's slug is not unique); a Markdown link to a page's source (`[x](<page>.md)`) is
    re-pointed like {doc}; `{{ expr }}` is rendered with myst_substitutions outside code
    spans. Bugs caught: relative `.md` links left dead in the notebook, appendices linked as
    raw MyST on GitHub, raw Jinja left in the prose, a substitution made inside code."""
    import shutil

    book = tmp_path / "minibook"
    shutil.copytree(MINI, book)
    with open(book / "_config.yml", "a") as config:
        config.write("html:\n  baseurl: https://example.github.io/minibook/\n"
                     "parse:\n  myst_substitutions:\n    repo_url: https://example.org/r\n")
    source = ('See [the notes](appendix-notes.md#times-of-the-chapters), [two](02-second.md), '
              '{ref}`the times <notes-times>` and ({{ "<" ~ repo_url ~ ">" }}); `{{ kept }}` stays, '
              r'so do $\hat{{p}}$, `[x](missing.md)` and <https://example.org/{{kept}}>.')

    def export_cell(text: str) -> str:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
        return markdown(export.plain_notebook(nb, "chapters/01-first", VALUES, root=book))

    assert export_cell(source) == (
        "See [the notes](https://example.github.io/minibook/chapters/appendix-notes.html"
        "#times-of-the-chapters), [two](https://example.github.io/minibook/chapters/"
        "02-second.html), [the times](https://example.github.io"
        "/minibook/chapters/appendix-notes.html#notes-times) and "
        "(<https://example.org/r>); `{{ kept }}` stays, so do $\\hat{{p}}$, `[x](missing.md)` "
        "and <https://example.org/{{kept}}>.")
    with pytest.raises(ValueError, match="no page 'chapters/missing'"):
        export_cell("[gone](missing.md)")
    with pytest.raises(ValueError, match="substitution"):
        export_cell("{{ no_such_name }}")
