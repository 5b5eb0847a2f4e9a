"""No file of the repository refers to a file that is not in it.

Every tracked (or new, not ignored) text file is scanned for file names with an extension
(`CONTRIBUTING.md`, `tests/site/conftest.py`), for paths under a folder of the repository
(`chapters/03-gd-to-svm`, `lib/maxmargin/`) and for "<document> section <N>" references to
documents without an extension. In Python files only comments and docstrings are scanned (string
literals in code are exercised by running the code). A reference is fine when it exists relative
to the repository root or to the referring file (as a file, a folder, or a page with the suffix
.md or .ipynb), when
its bare name is the name of a file or folder of the repository, when git ignores it (a build
product: `_build/html/reports/`, `.venv/bin/python`), or when it is a template (`chapters/NN-slug.md`,
`_build/screenshots/<page>.png`). The few names that are produced outside the repository are
listed in EXTERNAL with the reason.
"""
from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

from bookutils import ROOT

GIT = ["git", "-c", "safe.directory=*", "-C", str(ROOT)]
EXTENSIONS = "md|py|yml|yaml|toml|cfg|ini|json|sh|txt|bib|ipynb|js|css|cff|html|png|svg|rst"
URL = re.compile(r"\b[a-z][\w+.-]*://\S+")
# A file name with an extension, optionally with folders; not part of a longer path or a
# $VARIABLE/... path, not a function call (np.log(...)).
NAME = re.compile(rf"(?<![\w$@/.~-])((?:\.{{1,2}}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.(?:{EXTENSIONS}))"
                  r"(?![\w/(-])")
SECTION = re.compile(r"(?<![\w/.-])([\w-]+(?:\.[a-z]+)?) section \d")
TEMPLATE = re.compile(r"[<>{}*$]|NN|\.\.\.|…")
# Names that exist only outside the repository, and why they are mentioned.
EXTERNAL = {
    "share/jupyter/lab/settings/overrides.json": "written by postBuild inside Binder's environment",
    "_static/mathjax/tex-mml-chtml.js": "_vendor/ copied into _build/html/_static/ by the build",
    "mathjax/tex-mml-chtml.js": "fetched into _vendor/ by scripts/fetch_vendor.sh",
    "index.html": "the front page of the built site, _build/html/index.html",
    "fontawesome.js": "pydata-sphinx-theme's script, which _ext/templates/layout.html drops",
    "scripts/fontawesome.js": "the same script, as the theme's template names it",
    "sphinx_book_theme/layout.html": "the theme's template that _ext/templates/layout.html extends",
    "nbgrader_config.py": "nbgrader's settings in an instructor's course folder (teaching page)",
    "numbers.json": "a build's record of its numbers and verdicts, _build/html/_static/numbers.json, "
                    "kept per release as releases/<version>/numbers.json (none before 0.2.0)",
    "_static/book-search-index.js": "the search index by section that the build writes "
                                    "(_ext/booksite/search.py) into _build/html/_static/",
    "searchtools.js": "Sphinx's search script (sphinx/themes/basic/static/ in the venv)",
}
# Not scanned: vendored third-party text.
SKIP = {"LICENSE-CONTENT", "tests/repo/data/cff-1.2.0.schema.json"}


def repository_files() -> list[str]:
    out = subprocess.run(GIT + ["ls-files", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(f for f in out.splitlines() if (ROOT / f).is_file()
                  and not (ROOT / f).is_symlink())


def scanned_text(path: Path) -> str | None:
    """The text to scan: all of a text file, comments and docstrings of a Python file."""
    try:
        text = path.read_text(encoding="utf8")
    except UnicodeDecodeError:
        return None
    if "\0" in text:
        return None
    if path.suffix != ".py":
        return text
    parts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            parts.append(ast.get_docstring(node) or "")
    return "\n".join(parts)


def references(text: str, top_folders: set[str]) -> set[str]:
    """Candidate file references in ``text``."""
    text = URL.sub(" ", text)
    found = {m.group(1) for m in NAME.finditer(text)}
    folders = "|".join(sorted(map(re.escape, top_folders), key=len, reverse=True))
    path = re.compile(rf"(?<![\w$@/.~-])((?:\./)?(?:{folders})/[\w./-]*)")
    found |= {m.group(1) for m in path.finditer(text)}
    found |= {m.group(1) for m in SECTION.finditer(text) if re.search(r"[.-]", m.group(1))}
    return {ref.rstrip(".,:;") for ref in found}


def ignored(paths: list[str]) -> set[str]:
    """The paths that git ignores (build products, environments), existing or not."""
    paths = [p for p in paths if not p.startswith(("../", "/"))]  # git refuses outside paths
    if not paths:
        return set()
    proc = subprocess.run(GIT + ["check-ignore", "--no-index", "--stdin"], input="\n".join(paths),
                          capture_output=True, text=True)
    return set(proc.stdout.splitlines())


def resolves(ref: str, source: str, names: set[str]) -> bool:
    bare = ref.rstrip("/")
    if not bare or bare in EXTERNAL or TEMPLATE.search(ref):
        return True
    for base in (ROOT, (ROOT / source).parent):
        target = base / bare
        if target.exists() or any(target.with_name(target.name + s).exists()
                                   for s in (".md", ".ipynb")):
            return True
    if "/" not in bare:
        stem = bare if "." in bare else None
        return bare in names or (stem is None and any(n.split(".")[0] == bare for n in names))
    return False


def dangling() -> dict[str, list[str]]:
    files = repository_files()
    names = {part for f in files for part in Path(f).parts}
    top_folders = {Path(f).parts[0] for f in files if len(Path(f).parts) > 1}
    top_folders |= {line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines()
                    if line.strip() and not line.startswith("#") and "*" not in line}
    candidates: dict[str, set[str]] = {}
    for f in files:
        if f in SKIP:
            continue
        text = scanned_text(ROOT / f)
        if text:
            for ref in references(text, top_folders):
                if not resolves(ref, f, names):
                    candidates.setdefault(ref, set()).add(f)
    generated = ignored(sorted(candidates))
    return {ref: sorted(where) for ref, where in sorted(candidates.items())
            if ref not in generated and ref.rstrip("/") not in generated}


def test_no_dangling_references():
    missing = dangling()
    assert not missing, "references to files that are not in the repository:\n" + "\n".join(
        f"  {ref!r} in {', '.join(where)}" for ref, where in missing.items())


def test_the_scan_finds_dangling_references(tmp_path):
    """The scanner is not blind: references of the kinds this test was written for (a notes
    file, a design file, a notes section and a moved test, none in the repository) are found."""
    text = ("Tolerances from `missing-notes.md` section 5; see PLAN.md section 6 and\n"
            "setup-notes section 8. `tests/test_environment.py` checks the pins;\n"
            "`tests/lib/test_environment.py` and CONTRIBUTING.md exist.\n"
            "# see lib/maxmargin/no_such_module.py\n")
    top = {"tests", "lib", "chapters"}
    refs = references(text, top)
    names = {part for f in repository_files() for part in Path(f).parts}
    bad = {r for r in refs if not resolves(r, "README.md", names)}
    assert bad == {"missing-notes.md", "PLAN.md", "setup-notes", "tests/test_environment.py",
                   "lib/maxmargin/no_such_module.py"}, bad
