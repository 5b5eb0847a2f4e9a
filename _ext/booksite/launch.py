"""Launch buttons that open the exported notebook of a page.

**Binder opens a plain notebook.** The launch button of sphinx-book-theme opens the page's
source, a MyST Markdown file that JupyterLab shows as raw MyST (or, with jupytext, as a
notebook whose prose is full of `{glue:text}` placeholders). On Binder, `postBuild` exports
every notebook page to `notebooks/<name>.ipynb` (scripts/make_notebooks.py: plain Markdown,
numbers filled in), and the Binder and JupyterHub launch URLs are pointed at that file.
"""
from __future__ import annotations

from pathlib import Path


NOTEBOOK_DIR = "notebooks"   # where postBuild writes the exported notebooks, from the repo root


def exported_notebook(pagename: str) -> str:
    """The exported notebook of a page, relative to the repository root (see postBuild)."""
    return f"{NOTEBOOK_DIR}/{pagename.rsplit('/', 1)[-1]}.ipynb"


def launch_exported_notebooks(app, pagename, templatename, context, doctree) -> None:
    """Point the Binder and JupyterHub launch URLs of a page at its exported notebook."""
    source = Path(app.env.doc2path(pagename)).relative_to(app.srcdir).as_posix()
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            url = button.get("url", "")
            if button.get("text") in ("Binder", "JupyterHub") and source in url:
                button["url"] = url.replace(source, exported_notebook(pagename))
