// The book's ranking of search results, on Sphinx's search page (_ext/booksite/search.py says
// why Sphinx's own ranks in book order). Results, best first:
//  1. the units of window.BOOK_SEARCH_INDEX (_static/book-search-index.js) whose title holds
//     every query word (stemmed as Sphinx stems): definitions and the terms they define, then
//     page titles, then sections and other boxes, each kind by how much of its title the query
//     covers (a title that starts with the query a little ahead), then in book order;
//  2. Sphinx's other hits, in its order: those with an anchor (library objects, index entries)
//     as they are; in the places of its page hits, the pages 1. does not list, each placed at
//     its best section (the one whose own text holds most query words, closest together, most
//     often) and ordered by it, a page whose title holds query words ahead.
// Every result links to its section's anchor, with a snippet from that section (math as text,
// by search-snippets.js's converter). The pages are fetched as Sphinx fetches them for its
// snippets; where that fails (file://), 1. and Sphinx's anchored hits still link to their
// sections, and its page hits keep its order, linking to the top of the page.
(function () {
  "use strict";
  if (typeof Search === "undefined" || !Search._performSearch) return;

  const KIND_WEIGHT = { definition: 4, term: 4, page: 3, section: 2, result: 2, exercise: 1 };
  const PREFIX_BONUS = 0.25;
  const PAGE_TITLE_WEIGHT = 3;      // a page hit whose page title holds the query words
  const SNIPPET = 240;              // characters, as Sphinx's snippets
  const SKIP = "script, style, .headerlink, .cell, .toggle-details, .mm-explorer";
  const STOP = new Set(typeof stopwords === "undefined" ? [] : stopwords);
  const WORD = /[\p{Letter}\p{Number}_]+/gu;
  const stemmer = new Stemmer();
  const stemCache = new Map();

  const stem = (word) => {
    let s = stemCache.get(word);
    if (s === undefined) stemCache.set(word, (s = stemmer.stemWord(word)));
    return s;
  };
  // The stems of the searchable words of a text, in order (no stopwords, no bare numbers).
  const terms = (text) =>
    (text.toLowerCase().replace(/['’]s\b/g, "").match(WORD) || [])
      .filter((w) => !STOP.has(w) && !/^\d+$/.test(w))
      .map(stem);
  const texToText = (tex) => (window.bookTexToText ? window.bookTexToText(tex) : tex);
  const shownTitle = (title) => title.replace(/\\\((.*?)\\\)/g, (m, tex) => texToText(tex));
  const escapeHtml = (text) => {
    const span = document.createElement("span");
    span.textContent = text;
    return span.innerHTML;
  };

  // --- 1. title hits ---------------------------------------------------------------------
  let units = null;
  function loadUnits() {
    if (units) return units;
    const index = window.BOOK_SEARCH_INDEX;
    units = index.units.map(([doc, anchor, kind, title, label], order) => {
      const list = terms(shownTitle(title));
      return { doc: index.docs[doc], anchor, kind, label: shownTitle(label), order,
               list, set: new Set(list) };
    });
    return units;
  }

  const pageUnit = (doc) => loadUnits().find((u) => u.doc === doc && u.kind === "page");

  function titleHits(queryTerms) {
    const query = [...queryTerms];
    const hits = loadUnits()
      .filter((u) => query.length && query.every((q) => u.set.has(q)))
      .map((u) => {
        const prefix = new Set(u.list.slice(0, query.length));
        const starts = query.every((q) => prefix.has(q));
        const score = KIND_WEIGHT[u.kind] + query.length / u.set.size + (starts ? PREFIX_BONUS : 0);
        return { ...u, score };
      })
      .sort((a, b) => b.score - a.score || a.order - b.order);
    const seen = new Set();
    return hits.filter((h) => {
      const key = h.doc + "#" + h.anchor;
      return !seen.has(key) && seen.add(key);
    });
  }

  // --- the pages, fetched once --------------------------------------------------------------
  const pages = new Map();
  const FETCHABLE = location.protocol !== "file:";     // a browser fetches no file:// page
  function page(doc) {
    if (!FETCHABLE) return Promise.resolve(null);
    if (!pages.has(doc)) {
      const url = document.documentElement.dataset.content_root + doc +
        DOCUMENTATION_OPTIONS.FILE_SUFFIX;
      pages.set(doc, fetch(url)
        .then((response) => (response.ok ? response.text() : Promise.reject(response.status)))
        .then((html) => new DOMParser().parseFromString(html, "text/html"))
        .catch((error) => {
          console.warn(`book-search: ${url} could not be read (${error}): no snippet, no section`);
          return null;
        }));
    }
    return pages.get(doc);
  }

  const HEADING = /^H[1-6]$/;
  const INLINE = new Set(["A", "ABBR", "B", "CITE", "CODE", "EM", "I", "KBD", "MARK", "SMALL",
                          "SPAN", "STRONG", "SUB", "SUP", "VAR"]);
  const isHeadedSection = (el) =>
    el.tagName === "SECTION" && Array.from(el.children).some((c) => HEADING.test(c.tagName));

  // The TeX of a math element, without its equation number and header link.
  function mathTex(el) {
    const copy = el.cloneNode(true);
    copy.querySelectorAll(".eqno, .headerlink").forEach((n) => n.remove());
    return copy.textContent;
  }

  // The text of a unit as a reader sees it: its own, without its subsections, code cells,
  // scripts and header links; math as text; optionally without its heading.
  function ownText(el, withHeading = true) {
    const parts = [];
    const walk = (node, top) => {
      for (const child of node.childNodes) {
        if (child.nodeType === Node.TEXT_NODE) parts.push(child.nodeValue);
        if (child.nodeType !== Node.ELEMENT_NODE) continue;
        if (child.matches(SKIP) || isHeadedSection(child)) continue;
        if (top && !withHeading && (HEADING.test(child.tagName) ||
                                    child.matches("p.admonition-title"))) continue;
        const block = !INLINE.has(child.tagName);
        if (block) parts.push(" ");
        if (child.classList.contains("math")) parts.push(texToText(mathTex(child)));
        else walk(child, false);
        if (block) parts.push(" ");
      }
    };
    walk(el, true);
    return parts.join("").replace(/\s+/g, " ").trim();
  }

  // A unit's heading as the page shows it (a box's title line, "Definition 2.4 (...)").
  function heading(el) {
    const h = Array.from(el.children).find((c) => HEADING.test(c.tagName) ||
                                                    c.matches("p.admonition-title"));
    if (!h) return "";
    const copy = h.cloneNode(true);
    copy.querySelectorAll(".headerlink, .section-number").forEach((n) => n.remove());
    copy.querySelectorAll(".math").forEach((n) => (n.textContent = texToText(mathTex(n))));
    return copy.textContent.replace(/\s+/g, " ").trim();
  }

  // The searchable units of a fetched page: headed sections and sphinx-proof boxes.
  function pageUnits(doc) {
    if (doc.bookUnits) return doc.bookUnits;
    const main = doc.querySelector("article.bd-article") || doc.querySelector('[role="main"]');
    const els = main ? main.querySelectorAll("section[id], div.proof[id]") : [];
    doc.bookUnits = Array.from(els)
      .filter((el) => el.tagName !== "SECTION" || isHeadedSection(el))
      .map((el) => ({ id: el.id, list: terms(ownText(el)), heading: heading(el) }));
    return doc.bookUnits;
  }

  // How well a unit's own text answers the query: the share of query words it holds, how close
  // together (all adjacent, or within 8 words), how often.
  function contentScore(list, query) {
    const found = query.filter((q) => list.includes(q));
    if (!found.length) return 0;
    let score = (10 * found.length) / query.length;
    if (query.length > 1 && found.length === query.length) {
      const last = new Map();
      let span = Infinity;
      list.forEach((t, i) => {
        if (!query.includes(t)) return;
        last.set(t, i);
        if (last.size === query.length) span = Math.min(span, i - Math.min(...last.values()) + 1);
      });
      score += span <= query.length ? 4 : span <= 8 ? 2 : 0;
    }
    const count = list.filter((t) => query.includes(t)).length;
    return score + Math.min(3, Math.log2(1 + count));
  }

  function bestUnit(doc, query) {
    let best = null;
    for (const unit of pageUnits(doc)) {
      const score = contentScore(unit.list, query);
      if (score > 0 && (!best || score > best.score)) best = { ...unit, score };
    }
    return best;
  }

  // A snippet from a unit's own text: the window that holds most query words.
  function snippet(el, query) {
    let text = ownText(el, false);
    const positions = (t) => [...t.matchAll(WORD)]
      .map((m) => ({ at: m.index, term: stem(m[0].toLowerCase()) }))
      .filter((p) => query.includes(p.term));
    let hits = positions(text);
    if (!hits.length) {
      text = ownText(el, true);
      hits = positions(text);
    }
    let start = 0;
    if (hits.length) {
      let most = 0;
      for (const p of hits) {
        const near = new Set(hits.filter((h) => h.at >= p.at && h.at < p.at + SNIPPET / 2)
          .map((h) => h.term)).size;
        if (near > most) [most, start] = [near, p.at];
      }
      start = Math.max(0, start - 60);
      if (start > 0) start = text.indexOf(" ", start) + 1 || start;
    }
    let body = text.substr(start, SNIPPET);
    if (start + SNIPPET < text.length && body.lastIndexOf(" ") > SNIPPET / 2)
      body = body.slice(0, body.lastIndexOf(" "));           // end on a whole word
    body = body.trim();
    if (!body) return null;
    const p = document.createElement("p");
    p.classList.add("context");
    p.textContent = (start > 0 ? "..." : "") + body + (start + SNIPPET < text.length ? "..." : "");
    return p;
  }

  // --- display, as Sphinx's (ul.search > li > a, span or p.context) -------------------------
  function show(results, highlightTerms) {
    for (const r of results) {
      const item = document.createElement("li");
      const link = item.appendChild(document.createElement("a"));
      link.href = r.doc + DOCUMENTATION_OPTIONS.LINK_SUFFIX + (r.anchor ? "#" + r.anchor : "");
      link.dataset.score = r.score;
      link.innerHTML = r.title;
      if (r.descr) item.appendChild(document.createElement("span")).innerHTML = " (" + r.descr + ")";
      else if (r.snippet) item.appendChild(r.snippet);
      if (typeof SPHINX_HIGHLIGHT_ENABLED !== "undefined" && SPHINX_HIGHLIGHT_ENABLED)
        highlightTerms.forEach((term) => _highlightText(item, term, "highlighted"));
      Search.output.appendChild(item);
    }
    _finishSearch(results.length);
  }

  const sphinxQuery = Search.query;
  Search.query = async (query) => {
    if (!window.BOOK_SEARCH_INDEX) {
      console.error("book-search: _static/book-search-index.js is missing; Sphinx's ranking is used");
      return sphinxQuery(query);
    }
    const parsed = Search._parseQuery(query);
    const [, searchTerms, , highlightTerms] = parsed;   // stems, and the words as typed
    const sphinxResults = Search._performSearch(...parsed).reverse();   // best first
    const words = [...searchTerms];
    const titles = Search._index.titles;
    const pageTitle = (doc) => titles[Search._index.docnames.indexOf(doc)] || escapeHtml(doc);

    const hits = titleHits(searchTerms).map((h) => ({
      doc: h.doc, anchor: h.anchor, score: h.score,
      title: h.kind === "page" ? pageTitle(h.doc) : `${pageTitle(h.doc)} > ${escapeHtml(h.label)}`,
    }));
    const listed = new Set(hits.map((h) => h.doc + "#" + h.anchor));
    const hitDocs = new Set(hits.map((h) => h.doc));
    const rest = [], pageHits = [];         // Sphinx's other hits, in its order
    for (const [doc, title, anchor, descr, score] of sphinxResults) {
      const id = anchor.replace(/^#/, "");
      if (id && !listed.has(doc + "#" + id)) {
        rest.push({ doc, anchor: id, title, descr, score });
        listed.add(doc + "#" + id);
      } else if (!id && !hitDocs.has(doc)) {
        const hit = { doc, anchor: "", title, score: 0, page: true };
        rest.push(hit);
        pageHits.push(hit);
        hitDocs.add(doc);
      }
    }

    const shown = [...hits, ...rest].filter((r) => !r.descr);     // those that get a snippet
    const docs = await Promise.all([...new Set(shown.map((r) => r.doc))]
      .map(async (doc) => [doc, await page(doc)]));
    const fetched = new Map(docs);
    for (const r of pageHits) {
      const doc = fetched.get(r.doc);
      const best = doc && bestUnit(doc, words);
      if (!best) continue;
      const top = pageUnit(r.doc);
      const inTitle = top ? words.filter((q) => top.set.has(q)).length / words.length : 0;
      r.anchor = best.id;
      r.score = best.score + PAGE_TITLE_WEIGHT * inTitle;
      if (!top || best.id !== top.anchor) r.title += " > " + escapeHtml(best.heading);
    }
    pageHits.sort((a, b) => b.score - a.score);
    // The page hits take the places Sphinx gave page hits, best first; the others keep theirs.
    const results = [...hits, ...rest.map((r) => (r.page ? pageHits.shift() : r))];
    for (const r of results) {
      const doc = fetched.get(r.doc);
      const el = doc && r.anchor && !r.descr ? doc.getElementById(r.anchor) : null;
      if (el) r.snippet = snippet(el, words);
    }
    show(results, highlightTerms);
  };
})();
