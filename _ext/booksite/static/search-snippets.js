// Search results on the static site: Sphinx builds each snippet from the page's text, where
// math is still TeX between \( \) or \[ \] delimiters (MathJax typesets it only in the page).
// Before the snippet is cut, each math element's TeX is rewritten as plain text. The book's
// ranking (book-search.js) cuts its snippets itself, with this converter (window.bookTexToText).
(function () {
  "use strict";
  if (typeof Search === "undefined" || !Search.htmlToText) return;

  const SYMBOLS = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η",
    theta: "θ", lambda: "λ", mu: "μ", nu: "ν", pi: "π", rho: "ρ", sigma: "σ", tau: "τ",
    phi: "φ", varphi: "φ", psi: "ψ", omega: "ω", Gamma: "Γ", Delta: "Δ", Lambda: "Λ",
    Sigma: "Σ", Omega: "Ω", ell: "ℓ", infty: "∞", top: "ᵀ", langle: "⟨", rangle: "⟩",
    lVert: "‖", rVert: "‖", Vert: "‖", lvert: "|", rvert: "|", le: "≤", leq: "≤", ge: "≥",
    geq: "≥", ne: "≠", neq: "≠", approx: "≈", sim: "∼", in: "∈", notin: "∉", subset: "⊂",
    subseteq: "⊆", cup: "∪", cap: "∩", to: "→", rightarrow: "→", mapsto: "↦", times: "×",
    cdot: "·", cdots: "⋯", ldots: "…", dots: "…", sum: "∑", prod: "∏", nabla: "∇",
    partial: "∂", forall: "∀", exists: "∃", star: "⋆", circ: "∘", pm: "±", setminus: "∖",
    mid: "|",
  };

  const ACCENTS = {bar: "\u0304", overline: "\u0304", hat: "\u0302", widehat: "\u0302",
                   tilde: "\u0303", widetilde: "\u0303"};

  // Placeholders (private-use characters) for a space and braces that must survive the removal
  // of TeX's own spaces and grouping braces.
  const SPACE = "\ue000", OPEN = "\ue001", CLOSE = "\ue002";
  const NAMED = new Set(["arg", "min", "max", "log", "exp", "sup", "inf", "lim", "det", "sin",
                         "cos", "tan", "tanh", "sign", "diag"]);

  // TeX to plain text: symbols become Unicode, TeX's spaces are dropped (as TeX does in math),
  // relations get a space on each side. Not a TeX parser: enough for a search snippet.
  function texToText(tex) {
    let s = tex.trim();
    s = s.replace(/^\\\(|\\\)$/g, "").replace(/^\\\[|\\\]$/g, "").replace(/^\$\$|\$\$$/g, "");
    s = s.replace(/\\(?:begin|end)\{[^}]*\}/g, SPACE).replace(/\\\\/g, ";" + SPACE);
    s = s.replace(/\\(?:mathrm|mathbf|mathcal|mathbb|operatorname\*?|text|textbf|boldsymbol|mathit)\s*\{([^{}]*)\}/g,
                  (m, text) => text.replace(/ /g, SPACE));
    // accents as combining marks (p-bar, W-hat), fractions as a/b
    s = s.replace(/\\(bar|overline|hat|widehat|tilde|widetilde)\s*(?:\{([^{}]*)\}|([A-Za-z]))/g,
                  (m, accent, group, letter) => (group !== undefined ? group : letter)
                    + ACCENTS[accent]);
    s = s.replace(/\\[dt]?frac\s*(?:\{([^{}]*)\}|(\w))\s*(?:\{([^{}]*)\}|(\w))/g,
                  (m, a, a1, b, b1) => (a !== undefined ? a : a1) + "/" + (b !== undefined ? b : b1));
    s = s.replace(/\\(?:left|right|big|Big|bigg|Bigg)\b\s*/g, "");
    s = s.replace(/\\([A-Za-z]+)\s*|\\([,;:! {}])/g, (m, word, sym, at, all) => {
      if (sym) return sym === "{" ? OPEN : sym === "}" ? CLOSE : SPACE;
      if (word === "quad" || word === "qquad") return SPACE;
      if (word in SYMBOLS) return SYMBOLS[word];
      const next = all[at + m.length] || "";
      return NAMED.has(word) && /[A-Za-z0-9\\]/.test(next) ? word + SPACE : word;
    });
    s = s.replace(/\^\{?ᵀ\}?/g, "ᵀ").replace(/[{}]/g, "").replace(/&/g, SPACE);
    s = s.replace(/\s+/g, "");
    s = s.replace(/([=<>≤≥≠≈∈∉⊂⊆→↦])/g, " $1 ").replace(/,(?=\S)/g, ", ");
    s = s.replace(/\ue000/g, " ").replace(/\ue001/g, "{").replace(/\ue002/g, "}");
    return s.replace(/\s+/g, " ").trim();
  }

  const original = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(".math").forEach((el) => { el.textContent = " " + texToText(el.textContent) + " "; });
    return original(doc.documentElement.outerHTML, anchor);
  };
  window.bookTexToText = texToText;  // used by the browser test
})();
