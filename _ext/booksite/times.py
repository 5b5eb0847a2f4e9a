"""The `{chapter-times}` directive: the measured execution time of each page.

**Measured chapter times.** The `{chapter-times}` directive (used in the running appendix)
becomes a table of each executed page's wall time, as myst-nb measured it in this build (or in
the build that last executed the page), so the book states measured times, not guesses.
"""
from __future__ import annotations

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective


TIMES_FLAG = "booksite_chapter_times"


class chapter_times_node(nodes.General, nodes.Element):
    """Placeholder for the table of execution times, filled in after all pages are read."""


class ChapterTimes(SphinxDirective):
    """`{chapter-times}`: a table of the execution time of every page with code."""

    def run(self) -> list[nodes.Node]:
        from myst_nb.sphinx_ import NbMetadataCollector

        NbMetadataCollector.set_doc_data(self.env, self.env.docname, TIMES_FLAG, True)
        return [chapter_times_node()]


def _times_table(app: Sphinx, docname: str) -> nodes.Node:
    from myst_nb.sphinx_ import NbMetadataCollector

    data = NbMetadataCollector.get_doc_data(app.env)
    order = {name: i for i, name in enumerate(_toc_order(app))}
    rows = sorted(((name, meta["exec_data"]) for name, meta in data.items()
                   if meta.get("exec_data") and name in app.env.all_docs),
                  key=lambda row: (order.get(row[0], len(order)), row[0]))
    table = nodes.table(classes=["chapter-times", "colwidths-auto"])
    group = nodes.tgroup(cols=3)
    table += group
    group += [nodes.colspec(colwidth=w) for w in (60, 20, 20)]
    head = nodes.thead()
    group += head
    head += nodes.row("", *[nodes.entry("", nodes.paragraph(text=t))
                            for t in ("Page", "Seconds", "Result")])
    body = nodes.tbody()
    group += body
    for name, exec_data in rows:
        link = addnodes.pending_xref("", nodes.inline(text=name), refdoc=docname,
                                     reftarget="/" + name, reftype="doc", refdomain="std",
                                     refexplicit=False, refwarn=True)
        seconds = exec_data.get("runtime")
        result = "ran" if exec_data.get("succeeded") else f"failed ({exec_data.get('error')})"
        body += nodes.row("", nodes.entry("", nodes.paragraph("", "", link)),
                          nodes.entry("", nodes.paragraph(
                              text="-" if seconds is None else f"{seconds:.1f}")),
                          nodes.entry("", nodes.paragraph(text=result)))
    return table


def _toc_order(app: Sphinx) -> list[str]:
    """Docnames in reading order (the root, then its toctree, depth first)."""
    order, seen = [], set()

    def walk(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        order.append(name)
        for child in app.env.toctree_includes.get(name, []):
            walk(child)

    walk(app.config.root_doc)
    return order


class ChapterTimesTransform(SphinxPostTransform):
    default_priority = 8  # before the references are resolved (10)

    def run(self, **kwargs) -> None:
        for node in list(self.document.findall(chapter_times_node)):
            node.replace_self(_times_table(self.app, self.env.docname))


def pages_with_times(app: Sphinx, env) -> list[str]:
    """After a page was executed, the pages showing the table are written again."""
    from myst_nb.sphinx_ import NbMetadataCollector

    if not NbMetadataCollector.new_exec_data(env):
        return []
    return [name for name, meta in NbMetadataCollector.get_doc_data(env).items()
            if meta.get(TIMES_FLAG)]
