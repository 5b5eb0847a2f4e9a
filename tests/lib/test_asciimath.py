"""The translator of the library's plain-text formulas to TeX (_ext/booksite/asciimath.py), which
the API page (chapters/appendix-api.md) typesets, and its use by _ext/booksite/apidoc.py.

Each case is a formula as a docstring writes it and the TeX that must come out (whitespace
aside); the mutants at the end are realistic bugs of the translator, each of which some case
must catch.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

EXT = Path(__file__).resolve().parents[2] / "_ext"
sys.path.insert(0, str(EXT))
from booksite import asciimath  # noqa: E402
from booksite.apidoc import convert  # noqa: E402

CASES = [
    ("||p||", r"\lVert p\rVert"),
    ("||p||^2", r"\lVert p\rVert ^{2}"),
    ("||W||_F^2", r"\lVert W\rVert _{F}^{2}"),
    ("||W||_*", r"\lVert W\rVert _{*}"),
    ("||a|| + ||b||", r"\lVert a\rVert + \lVert b\rVert"),
    ("|x|", "|x|"),
    ("k_it = W^T x_it", r"k_{it} = W^{\top} x_{it}"),
    ("x_{i,alpha_i}", r"x_{i,\alpha _{i}}"),
    ("(x_{i,alpha_i} - x_it)^T W p >= 1", r"(x_{i,\alpha _{i}} - x_{it})^{\top} W p \ge 1"),
    ("k_it - k_itau", r"k_{it} - k_{i\tau }"),
    ("t != alpha_i", r"t \ne \alpha _{i}"),
    ("q <= 2", r"q \le 2"),
    ("X -> c X", r"X \to c X"),
    ("gamma_it", r"\gamma _{it}"),
    ("<Lambda, W>", r"\langle \Lambda , W \rangle"),
    ("eps", r"\varepsilon"),
    ("l(x) = log(1 + e^{-x})", r"\ell (x) = \log (1 + e^{-x})"),
    ("e^(-c x)", r"e^{-c x}"),
    ("2^52", r"2^{52}"),
    ("2^-e", r"2^{-e}"),
    ("p^mm", r"p^{\mathrm{mm}}"),
    ("p_fin", r"p_{\mathrm{fin}}"),
    ("p_bar(R)", r"\bar{p}(R)"),
    ("sum_i l(Y_i f_i)", r"\sum _{i} \ell (Y_{i} f_{i})"),
    ("argmin_p L(p)", r"\operatorname*{arg\,min} _{p} L(p)"),
    ("softmax(X_i W p)", r"\operatorname{softmax} (X_{i} W p)"),
    ("sqrt(2)", r"\sqrt{2}"),
    ("L* = 0", r"L^* = 0"),
    ("a * b", r"a \cdot b"),
    ("min ||x|| s.t. G x >= h", r"\min \lVert x\rVert \quad\text{s.t.}\quad G x \ge h"),
    ("grad_p L", r"\nabla _{p} L"),
    ("(0, inf)", r"(0, \infty )"),
    ("(..., n, T)", r"(\dots , n, T)"),
    ("50%", r"50\%"),
    ("-p_1 + 1e-12 p_2 >= 1", r"-p_{1} + 10^{-12} p_{2} \ge 1"),
    ("p_2 >= 2e12", r"p_{2} \ge 2 \cdot 10^{12}"),
]


def _squeeze(tex: str) -> str:
    return "".join(tex.split())


@pytest.mark.parametrize("ascii_formula, tex", CASES)
def test_translation(ascii_formula, tex):
    """The formula's TeX, up to whitespace."""
    assert _squeeze(asciimath.to_tex(ascii_formula)) == _squeeze(tex)


@pytest.mark.parametrize("broken", ["||p", "(x_it", "x_it)", "{a", "x_", "p^", "x_ + 1"])
def test_a_broken_formula_is_refused(broken):
    """A formula whose norms, brackets or scripts do not close stops the build (ValueError)
    instead of printing TeX that MathJax would show in red or half-typeset."""
    with pytest.raises(ValueError, match="formula"):
        asciimath.to_tex(broken)


def test_apidoc_typesets_backquoted_formulas_only():
    """apidoc turns `...` into :math:, leaves code, roles and doctests as written, and refuses
    a formula that runs over the end of its line (RST would print its backquotes). Bug caught:
    a formula in a definition's text, or in the prose of an Examples section, printed as typed."""
    doc = ["Keys `k_it = W^T x_it`, see :func:`gd` and ``W``.", "",
           "Parameters", "----------", "X : (n, T, d) tokens, `||x_it|| <= 1`.", "",
           "Examples", "--------", "The margin is `1 / ||p||`:", "",
           ">>> x = 1  # `not maths`", "`output`", ""]
    out = "\n".join(convert(doc))
    assert r"Keys :math:`k_{it} = W^{\top} x_{it}`" in out
    assert ":func:`gd` and ``W``" in out
    assert r"    (n, T, d) tokens, :math:`\lVert x_{it}\rVert \le 1`." in out
    assert r"The margin is :math:`1 / \lVert p\rVert`:" in out
    assert ">>> x = 1  # `not maths`\n`output`" in out
    with pytest.raises(ValueError, match="end on its line"):
        convert(["A formula `x_it", "over two lines`."])


# Realistic bugs of the translator: (source snippet, replacement). Each must make a case fail.
MUTANTS = [
    ('return r"{\\top}", k + 1', 'return "{T}", k + 1'),                       # ^T not a transpose
    ('r"\\lVert " if norms % 2 else r"\\rVert "', 'r"\\rVert " if norms % 2 else r"\\lVert "'),
    ('if value in LABELS:', 'if False:'),                                      # p^mm italic
    ('greek = _GREEK_TAIL.fullmatch(value)', 'greek = None'),                 # k_itau as i,t,a,u
    ('if value in GREEK:\n        return "\\\\" + value + " "', 'if False:\n        pass'),
    ('">=": r"\\ge"', '">=": r"\\le"'),                                         # >= as <=
    ('if norms % 2:\n        raise', 'if False:\n        raise'),                 # open norm kept
    ('"^*" if before not in', '"\\\\cdot " if before not in'),                  # L* as a product
    ('return "{-" + inner[1:-1] + "}", after', 'return "{-}" + inner, after'),  # 2^-e: 2^{-}e
    ('mantissa, exponent = value.split("e")', 'mantissa, exponent = value, ""'),  # 1e-12 lost
    ('_INNER_PRODUCT.sub(r"\\\\langle \\g<inner> \\\\rangle ", ascii_formula)', 'ascii_formula'),
]


def _mutated(old: str, new: str) -> types.ModuleType:
    source = (EXT / "booksite" / "asciimath.py").read_text()
    assert source.count(old) == 1, f"mutant snippet not found once: {old!r}"
    module = types.ModuleType("asciimath_mutant")
    exec(compile(source.replace(old, new), "asciimath_mutant", "exec"), module.__dict__)
    return module


def _cases_pass(module: types.ModuleType) -> bool:
    for ascii_formula, tex in CASES:
        try:
            if _squeeze(module.to_tex(ascii_formula)) != _squeeze(tex):
                return False
        except ValueError:
            return False
    for broken in ["||p", "(x_it", "x_it)", "{a", "x_", "p^"]:
        try:
            module.to_tex(broken)
            return False
        except ValueError:
            pass
    return True


def test_the_cases_pass_on_the_real_translator():
    """The harness of the mutants below sees the real translator pass (else every mutant
    would look killed)."""
    assert _cases_pass(asciimath)


@pytest.mark.parametrize("old, new", MUTANTS)
def test_mutant_is_caught(old, new):
    """Each mutant of the translator fails at least one case."""
    assert not _cases_pass(_mutated(old, new)), f"mutant survived: {old!r} -> {new!r}"
