"""Search ranks by relevance and lands on the section (issue 39; _ext/booksite/search.py).

Sphinx's own ranking gave every chapter the same score for a query of ordinary words and broke
the tie by the HTML of the page title, which starts with the section number: results came in
book order ("locally optimal" gave chapter 1 first, with its printed table of contents as the
snippet; "key-query" did not have chapter 7 in the top three), and every hit linked to the top
of its page. Here a chapter's title, a definition or a term a definition sets in italics must
bring its page first, linked to an anchor that exists on that page, in a section or box whose
text holds every query word, with a snippet that shows a query word.
"""
from __future__ import annotations

import re
from urllib.parse import unquote, urljoin, urlsplit

import pytest

pytestmark = pytest.mark.browser

WAIT_MS = 300_000   # as tests/site/test_browser.py: bounds a hang, decides nothing
# (query, the page that must come first, what the reader is looking for)
QUERIES = [
    ("locally optimal", "chapters/02-locally-optimal-tokens", "chapter 2's title, Definition 2.4"),
    ("key-query", "chapters/07-key-query-factorization", "chapter 7's title"),
    ("key query", "chapters/07-key-query-factorization", "chapter 7's title, words apart"),
    ("attention SVM", "chapters/02-locally-optimal-tokens", "Definition 2.2 (ATT-SVM)"),
    ("regularization path", "chapters/05-regularization-paths", "chapter 5, Definition 5.1"),
    ("joint training", "chapters/06-joint-training", "chapter 6's title"),
    ("optimizer picks the margin", "chapters/08-optimizer-geometry", "chapter 8's title"),
    ("optimizer geometry", "chapters/08-optimizer-geometry", "chapter 8's file name, in its text"),
    ("trap set", "chapters/04-traps-and-stress-tests", "Definition 4.1"),
    ("escape gap", "chapters/04-traps-and-stress-tests", "a term defined in Definition 4.1"),
]
STOPWORDS = {"the", "a", "of", "and", "in", "to"}

# The results once Sphinx's status line says the search finished: link and snippet of each.
RESULTS = """async () => {
  for (let i = 0; i < 3000; i++) {
    const status = document.querySelector('#search-results .search-summary');
    if (status && /finished|did not match/.test(status.innerText)) break;
    await new Promise(r => setTimeout(r, 100));
  }
  return Array.from(document.querySelectorAll('#search-results ul.search > li')).map(li => ({
    href: li.querySelector('a').href, title: li.querySelector('a').innerText,
    snippet: (li.querySelector('p.context') || {}).innerText || ''}));
}"""
# The text of the element the anchor names (a section or a box), or null when there is none.
ANCHORED_TEXT = "(id) => { const el = document.getElementById(id); return el && el.textContent; }"


def words(query: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9_]+", query.lower()) if w and w not in STOPWORDS]


def holds(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word)}", text.lower()) is not None


@pytest.mark.parametrize("query, expected, what", QUERIES, ids=[q for q, _, _ in QUERIES])
def test_search_finds_the_section_first(query, expected, what, browser, site_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        page.goto(f"{site_url}/search.html?q={query}", wait_until="load")
        results = page.evaluate(RESULTS)
        assert results, f"{query!r}: no results"
        top = results[0]
        shown = "\n".join(f"  {r['title']}  ({r['href']})" for r in results[:3])
        path = unquote(urlsplit(top["href"]).path).lstrip("/")
        assert path == expected + ".html", (
            f"{query!r} ({what}): the first result is {path}, not {expected}; the first three:\n"
            + shown)
        anchor = unquote(urlsplit(top["href"]).fragment)
        assert anchor, f"{query!r}: the first result links to the top of {path}, not a section"
        page.goto(urljoin(page.url, top["href"]), wait_until="load")
        text = page.evaluate(ANCHORED_TEXT, anchor)
    finally:
        context.close()
    assert text is not None, f"{query!r}: #{anchor} does not exist on {path}"
    missing = [w for w in words(query) if not holds(text, w)]
    assert not missing, f"{query!r}: the section #{anchor} of {path} lacks {missing}"
    assert any(holds(top["snippet"], w) for w in words(query)), (
        f"{query!r}: the snippet shows no query word: {top['snippet']!r}")
