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


_MARKUP = re.compile(r":math:`[^`]*`|``.+?``|:[\w:]+:`[^`]*`")


def _page_entries() -> tuple[set[str], dict[str, list[str]]]:
    """The names chapters/appendix-api.md documents with ``:members:`` (its autoclass entries),
    and the members listed by its automodule entries, by module (none listed: all)."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "chapters" / "appendix-api.md").read_text()
    classes = set(re.findall(r"^\.\. autoclass:: (maxmargin\.[\w.]+)\n   :members:", page, re.M))
    modules = {m: [n.strip() for n in names.split(",") if n.strip()] for m, names in
               re.findall(r"^\.\. automodule:: (maxmargin\.\w+)\n   :members:(.*)$", page, re.M)}
    return classes, modules


def _shown_docstrings() -> dict[str, str]:
    """name -> docstring of everything the API page shows: the public names, the modules it
    documents with automodule and their members it lists (all, if none), the members of the
    classes among them (methods, properties, attributes with ``#:`` comments) and the module
    data it documents (``#:`` comments)."""
    import importlib

    from sphinx.pycode import ModuleAnalyzer

    docs = {f"maxmargin.{name}": inspect.getdoc(obj) or "" for name, obj in CALLABLES.items()}
    classes, modules = _page_entries()
    classes |= {f"maxmargin.{name}" for name, obj in CALLABLES.items() if inspect.isclass(obj)}
    data = {"maxmargin.svm": ["SOLVERS", "W_NORMS", "NUCLEAR_TOL"]}
    for module_name, names in modules.items():
        module = importlib.import_module(module_name)
        docs[module_name] = inspect.getdoc(module) or ""
        attributes = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        shown = names or [name for name, value in vars(module).items() if not name.startswith("_")
                          and getattr(value, "__module__", None) == module_name]
        shown += [] if names else [member for space, member in attributes
                                   if not space and not member.startswith("_")]
        for name in shown:
            value = getattr(module, name)
            if inspect.isfunction(value) or inspect.isclass(value):
                docs[f"{module_name}.{name}"] = inspect.getdoc(value) or ""
                if inspect.isclass(value):
                    classes.add(f"{module_name}.{name}")
            else:
                data.setdefault(module_name, []).append(name)
    for dotted in classes:
        module_name, _, qualname = dotted.rpartition(".")
        cls = getattr(importlib.import_module(module_name), qualname)
        for member, value in vars(cls).items():
            target = value.fget if isinstance(value, property) else value
            if not member.startswith("_") and getattr(target, "__doc__", None):
                docs[f"{dotted}.{member}"] = inspect.getdoc(target) or ""
        attributes = ModuleAnalyzer.for_module(cls.__module__).find_attr_docs()
        for (namespace, member), lines in attributes.items():
            if namespace == cls.__qualname__:
                docs[f"{dotted}.{member}"] = "\n".join(lines)
    for module_name, names in data.items():
        attributes = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        for name in names:
            if ("", name) in attributes:
                docs[f"{module_name}.{name}"] = "\n".join(attributes["", name])
    return docs


def _prose(rst: list[str]) -> list[str]:
    """The lines of converted RST that a reader reads as text (no doctest and its output)."""
    out, in_doctest = [], False
    for line in rst:
        in_doctest = bool(line.strip()) and (in_doctest or line.lstrip().startswith(">>>"))
        if not in_doctest and not line.lstrip().startswith(".. "):
            out.append(line)
    return out


def test_no_formula_is_left_as_plain_text_on_the_reference_page():
    """Every formula that the API page shows is typeset: in each docstring the page shows, as
    _ext/booksite/apidoc.py converts it, no plain-text maths (``||p||``, ``x_it^T``,
    ``x_{i,alpha_i}``, ``sum_i``, ``gamma_it``, ``<a, b>``) is left outside ``:math:``, code or
    a role. Bug caught: a formula written without its backquotes (issue 39: 123 such places),
    which the page printed as ASCII-TeX."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_ext"))
    from booksite.apidoc import convert
    from booksite.asciimath import PLAIN_TEXT_MATHS

    docs = _shown_docstrings()
    # (svm.NUCLEAR_TOL's text is in appendix-api.md's data directive: the browser test reads it)
    assert {"maxmargin.SVMResult.norm",
            "maxmargin.normsvm.W_NORMS", "maxmargin.exactstep"} <= set(docs)
    left = {}
    for name, doc in docs.items():
        for line in _prose(convert(doc.splitlines())):
            text = _MARKUP.sub(" ", line).replace("\\|", "|").replace("\\*", "*")
            left.update({f"{name}: {m.group()!r}": line.strip()
                         for m in PLAIN_TEXT_MATHS.finditer(text)})
    assert not left, f"{len(left)} formulas as plain text:\n" + "\n".join(
        f"{k}  in  {v}" for k, v in sorted(left.items()))
