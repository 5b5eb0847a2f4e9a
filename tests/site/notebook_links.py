"""Where the links of an exported notebook lead, checked without a network.

An exported notebook (the site's downloads, Binder's notebooks, the course packs) links other
pages three ways: a sibling notebook (a relative path), a page of the published site (``html:
baseurl`` of _config.yml, checked against the built site: the file, and the heading's id), or a
file of the repository on GitHub (checked against the checkout). Other URLs are external.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import yaml
from markdown_it import MarkdownIt

from bookutils import ROOT, toc_docnames

_PARSER = MarkdownIt("commonmark")
PDF = "maxmargin-book.pdf"   # the book's PDF at the site's root


def hrefs(nb: nbformat.NotebookNode) -> list[str]:
    """The link targets of the notebook's markdown cells, as a Markdown renderer reads them."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for token in _PARSER.parse(cell.source):
            for child in token.children or []:
                if child.type == "link_open":
                    found.append(child.attrs["href"])
    return found


def dead_links(path: Path, site: Path | None, root: Path = ROOT) -> list[str]:
    """The links of the notebook at ``path`` that lead nowhere, or to a page's MyST source
    instead of the page: 'href: why' strings. Without ``site`` (no build at hand), a link into
    the site must name a page of the toc."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    site_url = config["html"]["baseurl"].rstrip("/") + "/"
    blob = f"{config['repository']['url'].rstrip('/')}/blob/{config['repository']['branch']}/"
    dead = []
    for href in hrefs(nbformat.read(path, as_version=4)):
        target, _, anchor = href.partition("#")
        if href == site_url + PDF:
            continue            # the deploy job adds it to the site (tests/repo/test_workflow.py)
        if href.startswith(site_url):
            name = unquote(target.removeprefix(site_url))
            if site is None:
                if name.removesuffix(".html") not in toc_docnames(root):
                    dead.append(f"{href}: no such page in the toc")
                continue
            page = site / name
            if not page.is_file():
                dead.append(f"{href}: no such page in the built site")
            elif anchor and not re.search(rf'\bid="{re.escape(anchor)}"', page.read_text()):
                dead.append(f"{href}: the page has no id {anchor!r}")
        elif href.startswith(blob):
            file = unquote(target.removeprefix(blob))
            if not (root / file).exists():
                dead.append(f"{href}: no such file in the repository")
            elif Path(file).with_suffix("").as_posix() in toc_docnames(root):
                dead.append(f"{href}: a page's MyST source (link the page on the site)")
        elif urlsplit(href).scheme or href.startswith("#"):
            continue            # external, or a heading of this notebook
        elif not (path.parent / unquote(target)).is_file():
            dead.append(f"{href}: no {target} beside {path.name}")
    return dead
