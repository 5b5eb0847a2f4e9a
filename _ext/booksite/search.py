"""Search by section: the book's own ranking on Sphinx's search page.

Sphinx 7.4's search (``searchtools.js``) ranks whole pages: a page scores 15 when any query word
is in any of its titles and 5 when it is only in the text, so for a query of ordinary words
nearly every chapter ties, and ties are broken by the page title as HTML, which starts with the
section number: results came in book order. Its section-level hits (``alltitles``) need the
whole query, as typed, inside a title at least half as long as that title ("locally optimal"
never matches "Locally-optimal ...", "key-query" never matches a 45-character chapter title),
so hits linked to the top of the page, and the snippet came from the first place in the page
(sidebar included) where a word occurs. ``html_search_scorer`` can only re-score those
page-level hits: it cannot add a section or an anchor.

This module writes, once every page is written and before the search page is, the units a
reader searches for into ``_static/book-search-index.js`` (about 26 kB, a script so that it
loads from file:// too): in book order, each page's title, every section, every sphinx-proof
box (definitions apart), every titled exercise and the terms a definition sets in italics
(``*locally optimal*``), each with its page, its anchor and the label a result shows
("Definition 2.4 (Locally-optimal selection)"). On the search page
``book-search.js`` (see its header) ranks first the units whose title holds every query word
(definitions and defined terms, then page titles, then sections and other boxes; a title that
the query covers more wins within each kind), then Sphinx's own hits, each page placed at its
best-matching section; every result links to its section's anchor with a snippet from that
section.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import docname_join

INDEX_FILE = "book-search-index.js"
# sphinx-proof's boxes other than definitions are searchable "results".
DEFINITION = "definition"


def node_text(node: nodes.Node, env=None) -> str:
    """The text of a title as the page shows it: a ``{doc}`` reference without a title of its
    own is the page's title; inline math stays TeX between \\( \\) (book-search.js shows
    it as text with search-snippets.js's converter)."""
    if isinstance(node, nodes.math):
        return f"\\({node.astext()}\\)"
    if isinstance(node, nodes.Text):
        return str(node)
    if (env is not None and isinstance(node, addnodes.pending_xref)
            and node.get("reftype") == "doc" and not node.get("refexplicit")):
        target = docname_join(node.get("refdoc", ""), node.get("reftarget", ""))
        if target in env.titles:
            return env.titles[target].astext()
    return "".join(node_text(child, env) for child in node.children)


def clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def box_title(node: nodes.Element, env) -> str:
    """A sphinx-proof box's own title, without the parentheses its title format adds."""
    title = next((c for c in node.children if isinstance(c, nodes.title)), None)
    text = clean(node_text(title, env)) if title is not None else ""
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    return text


def book_order(app: Sphinx) -> list[str]:
    """Docnames in the order of the table of contents (the root page first)."""
    env = app.env
    order: list[str] = []

    def visit(docname: str) -> None:
        if docname in order or docname not in env.found_docs:
            return
        order.append(docname)
        for child in env.toctree_includes.get(docname, []):
            visit(child)

    visit(app.config.root_doc)
    return order + sorted(set(env.found_docs) - set(order))


def page_units(app: Sphinx, docname: str) -> list[list]:
    """[anchor, kind, title, label] of every searchable unit of a page, in page order."""
    env = app.env
    doctree = env.get_doctree(docname)
    numbers = env.toc_fignumbers.get(docname, {})
    units: list[list] = []
    top = True
    for node in doctree.findall(nodes.Element):
        ids = node.get("ids") or []
        if not ids:
            continue
        if isinstance(node, nodes.section):
            title = next((c for c in node.children if isinstance(c, nodes.title)), None)
            if title is None:
                continue
            text = clean(node_text(title, env))
            units.append([ids[0], "page" if top else "section", text, text])
            top = False
        elif node.get("realtype"):                       # a sphinx-proof box
            kind = node["realtype"]
            title = box_title(node, env)
            number = ".".join(map(str, numbers.get(node.get("countertype", ""), {})
                                  .get(ids[0], ())))
            name = kind.title() + (f" {number}" if number else "")
            label = f"{name} ({title})" if title else name
            units.append([ids[0], DEFINITION if kind == DEFINITION else "result",
                          title or name, label])
            if kind == DEFINITION:
                terms = {clean(node_text(em, env)) for em in node.findall(nodes.emphasis)}
                units.extend([ids[0], "term", term, label]
                             for term in sorted(terms) if len(term) > 3)
        elif type(node).__name__ == "exercise_enumerable_node":   # sphinx-exercise's
            subtitle = next(node.findall(lambda n: type(n).__name__ == "exercise_subtitle"),
                            None)
            if subtitle is not None:
                title = clean(node_text(subtitle, env))
                units.append([ids[0], "exercise", title, f"Exercise ({title})"])
    return units


def write_search_index(app: Sphinx) -> list:
    """html-collect-pages (after every page is written, before the search page): the index."""
    if app.builder.name != "html":
        return []
    docs = book_order(app)
    units = [[i, *unit] for i, docname in enumerate(docs) for unit in page_units(app, docname)]
    data = json.dumps({"docs": docs, "units": units}, ensure_ascii=False,
                      separators=(",", ":")).replace("</", "<\\/")
    path = Path(app.outdir, "_static", INDEX_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"window.BOOK_SEARCH_INDEX = {data};\n", encoding="utf8")
    return []


def search_assets(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """The index and the ranking on the search page (deferred: before Sphinx's search starts)."""
    if pagename == "search":
        app.add_js_file(INDEX_FILE, defer="defer")
        app.add_js_file("book-search.js", defer="defer")


def setup_search(app: Sphinx) -> None:
    app.connect("html-collect-pages", write_search_index)
    app.connect("html-page-context", search_assets)
