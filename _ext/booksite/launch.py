"""The buttons that hand out a chapter as a notebook: all of them give the exported notebook.

**The notebook a reader gets is the plain one.** sphinx-book-theme's buttons hand out a page's
source, a MyST Markdown file (raw MyST in JupyterLab, which Colab cannot open at all), or, for
".ipynb", myst-nb's intermediate notebook: MyST roles and directives, ``{glue:text}``
placeholders, no install cell. The book exports every notebook page as a plain notebook
(scripts/export.py: plain Markdown, the measured numbers filled in, a first cell that installs
the library where it is missing), and every button hands out that one:

- **.ipynb download**: at the end of an HTML build, :func:`publish_notebooks` writes each
  notebook page's export to ``_build/html/notebooks/<name>.ipynb``, with the numbers of this
  very build (myst-nb's ``jupyter_execute/<page>.glue.json``); the download button links it.
- **Binder, JupyterHub**: on Binder, ``postBuild`` writes the same export into ``notebooks/``
  of the repository, and the launch URLs open ``notebooks/<name>.ipynb``.
- **Colab** opens notebooks from GitHub only: the workflow (.github/workflows/book.yml) pushes
  the published notebooks of main to the branch :data:`NOTEBOOK_BRANCH`, and the Colab button
  opens ``<repo>/blob/notebooks/<name>.ipynb``.
"""
from __future__ import annotations

import sys
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
REPOSITORY = Path(__file__).resolve().parents[2]   # the library's repository (its scripts)
NOTEBOOK_DIR = "notebooks"        # the exported notebooks: in the site, and on Binder
NOTEBOOK_BRANCH = "notebooks"     # the branch the workflow publishes them to, for Colab


def exported_notebook(pagename: str) -> str:
    """The exported notebook of a page, relative to the site's (or Binder's) root."""
    return f"{NOTEBOOK_DIR}/{pagename.rsplit('/', 1)[-1]}.ipynb"


def colab_url(colab: str, repo_url: str, pagename: str) -> str:
    """The Colab URL of a page's exported notebook on the branch :data:`NOTEBOOK_BRANCH`."""
    repo = repo_url.rstrip("/").removeprefix("https://github.com/")
    name = exported_notebook(pagename).removeprefix(f"{NOTEBOOK_DIR}/")
    return f"{colab.rstrip('/')}/github/{repo}/blob/{NOTEBOOK_BRANCH}/{name}"


def launch_exported_notebooks(app, pagename, templatename, context, doctree) -> None:
    """Point the .ipynb download and the Binder, JupyterHub and Colab buttons of a notebook
    page at its exported notebook."""
    source = Path(app.env.doc2path(pagename)).relative_to(app.srcdir).as_posix()
    for group in context.get("header_buttons", []):
        if any(b.get("label") == "download-notebook-button" for b in group.get("buttons", [])):
            # a notebook page's MyST source holds the build's glue cells, which no reader
            # should meet (issue 39): the page offers the exported notebook and the PDF only
            group["buttons"] = [b for b in group["buttons"]
                                if b.get("label") != "download-source-button"]
        for button in group.get("buttons", []):
            url = button.get("url", "")
            if button.get("label") == "download-notebook-button":
                button["url"] = context["pathto"](exported_notebook(pagename), 1)
                button["tooltip"] = "Download the notebook (plain Jupyter, runs anywhere)"
            elif button.get("text") in ("Binder", "JupyterHub") and source in url:
                button["url"] = url.replace(source, exported_notebook(pagename))
            elif button.get("text") == "Colab":
                colab = app.config.html_theme_options["launch_buttons"]["colab_url"]
                button["url"] = colab_url(colab, app.config.html_theme_options["repository_url"],
                                          pagename)


def publish_notebooks(app: Sphinx, exception: Exception | None) -> None:
    """Write each notebook page's export to ``<outdir>/notebooks/`` (pages that failed to
    execute are left out: their failure is reported). An export that fails is a warning, so
    the build with ``-W`` fails naming the page."""
    if exception is not None or app.builder.name != "html":   # the site, not `make pdf`
        return
    if str(REPOSITORY / "scripts") not in sys.path:
        sys.path.insert(0, str(REPOSITORY / "scripts"))
    import nbformat
    from bookutils import chapter_notebooks
    from export import export_notebook, read_config, read_glue_json

    from .failures import _failures

    root = Path(app.srcdir)
    failed = {docname for docname, _ in _failures(app)}
    executed = Path(app.outdir).parent / "jupyter_execute"
    folder = Path(app.outdir) / NOTEBOOK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    config = read_config(REPOSITORY)
    for path in chapter_notebooks(root):
        docname = path.relative_to(root).with_suffix("").as_posix()
        if docname in failed:
            continue
        glue = executed / f"{docname}.glue.json"     # none when the page glues nothing
        values = read_glue_json(glue) if glue.exists() else {}
        try:
            nb = export_notebook(path, values, config=config, root=root)
            nbformat.validate(nb)
        except (ValueError, nbformat.ValidationError) as error:
            LOGGER.warning(f"the notebook of {docname} was not published: {error}",
                           location=docname)
            continue
        nbformat.write(nb, folder / Path(exported_notebook(docname)).name)
