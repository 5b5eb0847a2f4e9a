"""maxmargin.book.tables: the result tables of the chapters, as HTML and as plain text."""
import numpy as np
import pytest

from maxmargin.book import tables


def test_plain_text_is_aligned_and_formatted_per_column():
    """Bugs caught: a column's format applied to another column, numbers aligned left, the
    header rule not as wide as its column, the title dropped."""
    t = tables.table([["NGD on W", 30.59285670819829, 3], ["GD on (K, Q)", 0.3936174, 12]],
                     ["run", "smallest gap", "rank"], [None, ".2f", "d"], title="Four runs")
    assert repr(t).splitlines() == [
        "Four runs",
        "run           smallest gap  rank",
        "------------  ------------  ----",
        "NGD on W             30.59     3",
        "GD on (K, Q)          0.39    12",
    ]
    assert str(t) == repr(t)


def test_html_has_headers_cells_and_alignment():
    """Bugs caught: headers or values not escaped (a '<' breaks the page), a text column
    marked as numbers, the caption missing."""
    t = tables.table([["a < b", 1.5e-7], ["c", 2.0]], ["case", "error"], [None, ".1e"],
                     title="x & y")
    page = t._repr_html_()
    assert page.startswith('<div class="pst-scrollable-table-container">'
                           '<table class="mm-table"><caption>x &amp; y</caption>')
    assert '<th class="text">case</th><th class="num">error</th>' in page
    assert '<td class="text">a &lt; b</td><td class="num">1.5e-07</td>' in page
    assert page.count("<tr>") == 3


def test_functions_and_missing_formats():
    """Bugs caught: a format function ignored, a column without a format not shown as str,
    a bool column aligned as a number."""
    t = tables.table([[True, [2, 3], 0.25]], ["settled", "tokens", "share"],
                     [None, lambda a: ", ".join(map(str, a)), lambda x: f"{x:.0%}"])
    assert t.cells == [["True", "2, 3", "25%"]]
    assert t.right == [False, False, True]


def test_wrong_shapes_are_refused():
    """Bug caught: a row with a missing value, or too few formats, silently shifts columns."""
    with pytest.raises(ValueError, match="row 1: 1 values for 2 columns"):
        tables.table([[1, 2], [3]], ["a", "b"])
    with pytest.raises(ValueError, match="formats: 1 for 2 columns"):
        tables.table([[1, 2]], ["a", "b"], [".2f"])
    with pytest.raises(ValueError, match="values: shape"):
        tables.matrix(np.zeros((2, 3)), ["r1", "r2"], ["c1", "c2"])


def test_matrix_labels_rows_and_columns():
    """Bugs caught: rows and columns swapped, a value formatted by the label column's format,
    the corner header lost."""
    t = tables.matrix(np.array([[0.12345, 1.0], [2.5, -3.0]]), ["p = 2", "p = 3"],
                      ["q = 2", "q = 3"], ".3f", corner="p \\ q")
    assert t.headers == ["p \\ q", "q = 2", "q = 3"]
    assert t.cells == [["p = 2", "0.123", "1.000"], ["p = 3", "2.500", "-3.000"]]
    assert t.right == [False, True, True]


def test_vector_for_a_sentence():
    """Bugs caught: the format ignored, entries dropped, a matrix flattened silently, rounding
    noise shown as a number, or small values taken for noise (the cut is relative)."""
    assert tables.vector(np.array([0.844631, 0.171123, 0.0])) == "(0.8446, 0.1711, 0)"
    assert tables.vector([1.0, -1.0, 1.0], "+g") == "(+1, -1, +1)"
    assert tables.vector([1.212e-16, 1.0]) == "(0, 1)"           # a solver's rounding
    assert tables.vector([1e-14, 3e-14]) == "(1e-14, 3e-14)"     # small but not noise
    assert tables.vector([0, 3]) == "(0, 3)"
    with pytest.raises(ValueError, match="expected a vector"):
        tables.vector(np.zeros((2, 2)))
