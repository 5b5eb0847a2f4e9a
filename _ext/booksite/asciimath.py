"""The library's plain-text maths as TeX: what the library reference typesets.

A docstring of ``maxmargin`` marks a formula with single backquotes, written as a reader types it
in a console: ```p^mm = argmin ||p|| s.t. (x_{i,alpha_i} - x_it)^T W p >= 1```. On the API page
(:mod:`booksite.apidoc`) :func:`to_tex` turns the text between the backquotes into TeX for a
``:math:`` role, so ``help()`` stays readable and the page shows typeset maths. The notation:

* ``||x||`` a norm, ``|x|`` an absolute value, ``<a, b>`` an inner product;
* ``x_it``, ``x_{i,alpha_i}``, ``k_itau`` (indices i and tau) subscripts, ``x^2``, ``e^{-x}``, ``e^(-x)`` superscripts;
  ``^T`` is the transpose; a label such as ``mm``, ``fin`` or ``relax`` in a script is upright
  (``p^mm``); ``p_bar`` is p with a bar;
* Greek letters by name (``alpha``, ``gamma_it``, ``Lambda``; ``eps`` is epsilon), ``l`` the
  loss ell, ``grad`` nabla, ``inf`` infinity;
* ``1e-12`` a power of ten; ``>=``, ``<=``, ``!=``, ``->``; ``a * b`` a product, ``L*`` and ``||W||_*`` starred;
  ``...`` an ellipsis; ``s.t.`` "subject to";
* any other word of two or more letters is an upright operator name (``softmax``, ``diag``,
  ``log``, ``sum_i``, ``argmin``), ``sqrt(x)`` a square root.

A formula whose braces or parentheses do not balance raises ``ValueError``: the build stops
instead of printing a broken formula.
"""
from __future__ import annotations

import re

GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "kappa", "lambda",
         "mu", "nu", "xi", "pi", "rho", "sigma", "tau", "phi", "chi", "psi", "omega",
         "Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Phi", "Psi", "Omega"}
SPECIAL_WORDS = {"eps": r"\varepsilon", "epsilon": r"\varepsilon", "l": r"\ell",
                 "grad": r"\nabla", "inf": r"\infty"}
NAMED_OPERATORS = {"log", "exp", "max", "min", "sup", "sin", "cos", "tanh", "det", "sum", "prod"}
LIMIT_OPERATORS = {"argmin": r"\operatorname*{arg\,min}", "argmax": r"\operatorname*{arg\,max}"}
LABELS = {"mm", "fin", "relax", "opt", "svm", "max", "min", "reg", "init", "exact"}
ACCENTS = {"bar": r"\bar", "hat": r"\hat", "tilde": r"\tilde"}
SYMBOLS = {">=": r"\ge", "<=": r"\le", "!=": r"\ne", "->": r"\to",
           "...": r"\dots", "…": r"\dots", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$"}

_TOKEN = re.compile(r"""(?P<command>\\[A-Za-z]+\*?|\\[,;:!| ])
    |(?P<subject_to>s\.t\.)
    |(?P<symbol>\|\||>=|<=|!=|->|\.\.\.|…|[%&\#$])
    |(?P<accented>(?<![A-Za-z])[A-Za-z]_(?:bar|hat|tilde)(?![A-Za-z0-9]))
    |(?P<word>[A-Za-z]+)
    |(?P<number>\d+(?:\.\d+)?(?:e-?\d+(?![A-Za-z]))?)
    |(?P<space>\s+)
    |(?P<other>.)""", re.X | re.S)
# Maths left as plain text, what the typeset page must no longer show outside math and code: a
# norm, an absolute value, a power or a transpose, a subscript, a sum or an arg min, a Greek
# letter by name, an inner product (tests/lib/test_docstrings.py, tests/site/test_browser.py).
PLAIN_TEXT_MATHS = re.compile(r"""\|\|[^|]*\|\|
    | \|[^|\s][^|]{0,40}\|
    | [\w)\]}]\^[\w{(*-]
    | [A-Za-z)\]]_\{
    | \bL\*
    | \b[A-Za-z]_[A-Za-z0-9]{1,4}\b
    | \b(?:sum|max|min|argmax|argmin|prod)_\w
    | \b(?:argmin|argmax|sqrt)\b
    | \b(?:alpha|beta|gamma|delta|epsilon|eta|theta|lambda|mu|nu|xi|rho|sigma|tau|phi|psi|omega
          |Lambda|Sigma|Gamma|Delta)(?:_\w+)?\b
    | <[^<>=\n]{1,40},[^<>=\n]{1,40}>""", re.X)
_GREEK_TAIL = re.compile(r"([a-z]+)(" + "|".join(sorted(GREEK, key=len, reverse=True)) + ")")
_INNER_PRODUCT = re.compile(r"<(?P<inner>[^<>=]*,[^<>=]*)>")


def to_tex(ascii_formula: str) -> str:
    """The TeX of one formula in the library's plain-text notation (see the module docstring)."""
    text = _INNER_PRODUCT.sub(r"\\langle \g<inner> \\rangle ", ascii_formula)
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(text)]
    tex = _translate(tokens, ascii_formula)
    return " ".join(tex.split())


def _matching(tokens, start, opening, closing, formula):
    """The index of the token that closes the bracket opened at ``tokens[start]``."""
    depth = 0
    for k in range(start, len(tokens)):
        depth += (tokens[k][1] == opening) - (tokens[k][1] == closing)
        if depth == 0:
            return k
    raise ValueError(f"unbalanced {opening!r} in the formula {formula!r}")


def _script(tokens, k, marker, formula):
    """The TeX of the sub- or superscript after ``tokens[k - 1]`` (the ``_`` or ``^``) and
    the index after it."""
    if k >= len(tokens):
        raise ValueError(f"{marker!r} without a script at the end of the formula {formula!r}")
    kind, value = tokens[k]
    if value in ("{", "("):
        close = _matching(tokens, k, value, "}" if value == "{" else ")", formula)
        inner = _translate(tokens[k + 1:close], formula)
        return "{" + inner + "}", close + 1
    if marker == "^" and value == "T":
        return r"{\top}", k + 1
    if kind == "word":
        if value in GREEK or value in SPECIAL_WORDS:
            return "{" + _word(value) + "}", k + 1
        if value in LABELS:
            return "{\\mathrm{" + value + "}}", k + 1
        greek = _GREEK_TAIL.fullmatch(value)       # k_itau: the indices i and tau
        return "{" + (greek[1] + "\\" + greek[2] + " " if greek else value) + "}", k + 1
    if kind == "number" or value == "*" or kind == "command":
        return "{" + value + "}", k + 1
    if value == "-" and k + 1 < len(tokens) and tokens[k + 1][0] in ("word", "number"):
        inner, after = _script(tokens, k + 1, marker, formula)
        return "{-" + inner[1:-1] + "}", after
    raise ValueError(f"{marker!r} followed by {value!r} in the formula {formula!r}")


def _word(value: str) -> str:
    """The TeX of a name: a Greek letter, a special word, a letter or an operator name."""
    if value in SPECIAL_WORDS:
        return SPECIAL_WORDS[value] + " "
    if value in GREEK:
        return "\\" + value + " "
    if len(value) == 1:
        return value
    if value in LIMIT_OPERATORS:
        return LIMIT_OPERATORS[value] + " "
    if value in NAMED_OPERATORS:
        return "\\" + value + " "
    return "\\operatorname{" + value + "} "


def _translate(tokens, formula: str) -> str:
    """The TeX of a run of tokens (a whole formula, or what a pair of brackets encloses)."""
    out: list[str] = []
    k = 0
    norms = 0
    while k < len(tokens):
        kind, value = tokens[k]
        k += 1
        if kind == "number" and "e" in value:           # 1e-12: 10^{-12}
            mantissa, exponent = value.split("e")
            out.append(("" if mantissa == "1" else mantissa + r" \cdot ") + "10^{" + exponent + "}")
        elif kind in ("command", "space", "number"):
            out.append(value + (" " if kind == "command" else ""))
        elif kind == "subject_to":
            out.append(r"\quad\text{s.t.}\quad ")
        elif value == "||":
            norms += 1
            out.append(r"\lVert " if norms % 2 else r"\rVert ")
        elif kind == "symbol":
            out.append(SYMBOLS[value] + " ")
        elif kind == "accented":
            out.append(ACCENTS[value[2:]] + "{" + value[0] + "}")
        elif kind == "word":
            if value == "sqrt" and k < len(tokens) and tokens[k][1] == "(":
                close = _matching(tokens, k, "(", ")", formula)
                inner = _translate(tokens[k + 1:close], formula)
                out.append(r"\sqrt{" + inner + "}")
                k = close + 1
            else:
                out.append(_word(value))
        elif value in "_^":
            script, k = _script(tokens, k, value, formula)
            out.append(value + script)
        elif value == "*":
            before = tokens[k - 2][0] if k >= 2 else "space"
            after = tokens[k][0] if k < len(tokens) else "space"
            out.append("^*" if before not in ("space", "other") and after in ("space", "other")
                       else r"\cdot ")
        elif value in "{(":
            close = _matching(tokens, k - 1, value, "}" if value == "{" else ")", formula)
            inner = _translate(tokens[k:close], formula)
            out.append(("{" + inner + "}") if value == "{" else ("(" + inner + ")"))
            k = close + 1
        elif value in "})":
            raise ValueError(f"unbalanced {value!r} in the formula {formula!r}")
        else:
            out.append(value)
    if norms % 2:
        raise ValueError(f"a norm ||...|| left open in the formula {formula!r}")
    return "".join(out)
