"""The library's docstrings: what the API reference page (chapters/appendix-api.md) shows.

Every public name documents its inputs, outputs and errors in the book's convention (numpydoc
section titles; under Parameters, ``name : shape and meaning``), and every function and class
has an example that runs: the examples are doctests, executed here, so an example that no
longer matches the library fails this test instead of misleading a reader.
"""
from __future__ import annotations

import doctest
import inspect
import re

import numpy as np
import pytest

import maxmargin as mm


def public_objects() -> dict[str, object]:
    """name -> object: the names of ``maxmargin`` and of its modules ``data`` and ``nn``
    (their own definitions, not what they import)."""
    found = {name: getattr(mm, name) for name in mm.__all__
             if not inspect.ismodule(getattr(mm, name))}
    for module in (mm.data, mm.nn):
        for name, value in vars(module).items():
            if (not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
                    and value.__module__ == module.__name__):
                found[f"{module.__name__.removeprefix('maxmargin.')}.{name}"] = value
    return found


OBJECTS = public_objects()
CALLABLES = {n: o for n, o in OBJECTS.items() if inspect.isfunction(o) or inspect.isclass(o)}


def sections(doc: str) -> set[str]:
    return set(re.findall(r"^(\w[\w ]*)\n-{3,}$", doc, re.M))


def test_the_names_are_found():
    """The collection above is not empty or truncated (a test over nothing passes)."""
    assert {"gd", "att_svm", "Trajectory", "data.fig1", "nn.PromptAttention"} <= set(OBJECTS)
    assert len(CALLABLES) >= 60


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_docstring_has_the_sections(name):
    """Functions: Parameters (when they take any), Returns, Examples (and Raises when the
    function raises on purpose); classes: Attributes or Parameters, and Examples."""
    obj = CALLABLES[name]
    doc = inspect.getdoc(obj) or ""
    found = sections(doc)
    assert doc.splitlines() and doc.splitlines()[0].strip(), f"{name}: no summary line"
    if inspect.isclass(obj):
        assert found & {"Attributes", "Parameters"}, f"{name}: no Attributes or Parameters"
    else:
        takes = [p for p in inspect.signature(obj).parameters.values()
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if takes:
            assert "Parameters" in found, f"{name}: no Parameters section"
            documented = set(re.findall(r"^(\w+(?:, \w+)*) :", doc, re.M))
            names = {n for entry in documented for n in entry.split(", ")}
            missing = [p.name for p in takes if p.name not in names]
            assert not missing, f"{name}: parameters without an entry: {missing}"
        assert "Returns" in found or inspect.signature(obj).return_annotation in (None, "None"), \
            f"{name}: no Returns section"
        source = inspect.getsource(obj)
        if re.search(r"\braise (ValueError|TypeError)\b", source):
            assert "Raises" in found, f"{name}: raises on purpose but has no Raises section"
    assert "Examples" in found, f"{name}: no Examples section"


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_examples_run(name):
    """The examples are doctests and pass (numbers printed to a few digits, so BLAS kernels
    that differ in the last bits agree)."""
    obj = CALLABLES[name]
    finder = doctest.DocTestFinder(recurse=False)
    tests = finder.find(obj, name, globs={"mm": mm, "np": np})
    examples = [t for t in tests if t.examples]
    assert examples, f"{name}: no runnable example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in examples:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


def test_the_reference_page_has_every_public_name():
    """chapters/appendix-api.md has one autodoc entry per public name, and no entry for a name
    the library does not have. Bug caught: a function added to the library and missing from
    the reference (autodoc would not warn), or an entry left after a rename."""
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "chapters" / "appendix-api.md"
    entries = re.findall(r"^\.\. (?:auto(?:function|class|data)|py:data):: maxmargin\.([\w.]+)$",
                         page.read_text(), re.M)
    assert len(entries) == len(set(entries)), "a name has two entries"
    missing = sorted(set(OBJECTS) - set(entries))
    assert not missing, f"no entry on {page.name} for: {missing}"
    unknown = [e for e in entries
               if e not in OBJECTS and e not in {"svm.SOLVERS", "svm.W_NORMS", "svm.NUCLEAR_TOL"}]
    assert not unknown, f"{page.name} documents names that are not public: {unknown}"


def _documented() -> dict[str, str]:
    """name -> docstring of everything the API page shows: the public names, the modules
    ``data``, ``nn`` and ``reference`` and their public functions and classes."""
    docs = {name: inspect.getdoc(obj) or "" for name, obj in CALLABLES.items()}
    for module in (mm.data, mm.nn, mm.reference, mm.exactstep, mm.normsvm, mm.optimizers):
        docs[module.__name__] = inspect.getdoc(module) or ""
        for name, value in vars(module).items():
            if (not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
                    and value.__module__ == module.__name__):
                docs[f"{module.__name__}.{name}"] = inspect.getdoc(value) or ""
    return docs


def test_every_docstring_reads_as_rst_on_the_reference_page():
    """Each docstring, as the book's extension converts it for the API page
    (_ext/booksite/apidoc.py), parses as RST without a warning: the -W build fails on one, five
    minutes into `make test`. Bug caught: the escaping of '*' turned the bullets of
    maxmargin.reference's docstring into a broken definition list."""
    import io
    import sys
    from pathlib import Path

    import docutils.core

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_ext"))
    from booksite.apidoc import convert
    from docutils import nodes
    from docutils.parsers.rst import roles

    for role in ("func", "class", "mod", "data", "meth", "attr", "obj", "exc", "math", "ref",
                 "doc", "py:func", "py:class"):   # Sphinx's roles, unknown to plain docutils
        roles.register_generic_role(role, nodes.literal)
    problems = {}
    for name, doc in _documented().items():
        stream = io.StringIO()
        docutils.core.publish_doctree("\n".join(convert(doc.splitlines())),
                                      settings_overrides={"warning_stream": stream,
                                                          "report_level": 2})
        if stream.getvalue():
            problems[name] = stream.getvalue()
    assert not problems, "\n".join(f"{k}: {v}" for k, v in problems.items())
