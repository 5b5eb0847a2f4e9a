"""Releases: the tag, CITATION.cff, pyproject.toml and CHANGELOG.md must agree for a release to
proceed (scripts/release.py and .github/workflows/release.yml), and the "Updates and
corrections" page's rule for what counts as a change (_ext/booksite/corrections.py)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from bookutils import ROOT

sys.path.insert(0, str(ROOT / "_ext"))
from booksite.corrections import diff_records, is_change, previous_release  # noqa: E402
from release import release_errors  # noqa: E402

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture
def repo(tmp_path):
    """A copy of the three files a release check reads."""
    for name in ("pyproject.toml", "CITATION.cff", "CHANGELOG.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {path.name}"
    path.write_text(text.replace(old, new))


def test_this_version_may_be_released():
    """The repository as it is: CITATION.cff says pyproject's version with a release date, and
    CHANGELOG.md has the version's section of that date; the command exits 0."""
    v = version()
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert str(cff["version"]) == v and re.fullmatch(r"\d{4}-\d{2}-\d{2}", cff["date-released"])
    assert re.search(rf"^## {re.escape(v)}\b.*\({cff['date-released']}\)$",
                     (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert release_errors(f"v{v}") == []
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "release.py"), "check", f"v{v}"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("file, old, new, blamed", [
    (None, None, None, "pyproject.toml"),                            # the tag is another version
    ("pyproject.toml", 'version = "{v}"', 'version = "9.9.9"', "pyproject.toml"),
    ("CITATION.cff", "version: {v}", "version: 9.9.9", "CITATION.cff"),
    ("CITATION.cff", "date-released:", "date-releasd:", "CITATION.cff"),
    ("CHANGELOG.md", "## {v},", "## 9.9.9,", "CHANGELOG.md"),
    ("CHANGELOG.md", "first release (", "first release (1999-01-01) (", "CHANGELOG.md"),
])
def test_a_disagreement_stops_the_release(repo, file, old, new, blamed):
    """Each disagreement alone (another tag, pyproject's or CITATION.cff's version, no release
    date, no CHANGELOG section or one of another date) is refused, naming the file."""
    v = version()
    tag = "v9.9.9" if file is None else f"v{v}"
    if file is not None:
        edit(repo / file, old.format(v=v), new.format(v=v))
    errors = release_errors(tag, root=repo)
    assert any(e.startswith(f"{blamed}:") for e in errors), errors


def test_the_command_refuses_a_wrong_tag():
    for tag in (f"{version()}", "v9.9.9"):
        run = subprocess.run([sys.executable, str(ROOT / "scripts" / "release.py"), "check", tag],
                             capture_output=True, text=True)
        assert run.returncode == 1 and f"release {tag}:" in run.stderr, (tag, run.stderr)


def test_release_workflow_checks_first_and_attaches_the_pdf_and_packs():
    """On a tag v*, the check runs before anything (every other job needs it), the build makes
    the site, the PDF and the course packs, and the only job that may write attaches the PDF
    and the packs to the release with the CHANGELOG's notes."""
    data = yaml.safe_load(WORKFLOW.read_text())
    on = data.pop(True, data.get("on"))                 # YAML 1.1 reads `on` as True
    assert on == {"push": {"tags": ["v*"]}}, on
    jobs = data["jobs"]
    runs = {name: "\n".join(s.get("run", "") for s in job["steps"]) for name, job in jobs.items()}
    (check,) = [n for n, r in runs.items() if 'scripts/release.py check "$GITHUB_REF_NAME"' in r]

    def needs(name):
        direct = jobs[name].get("needs", [])
        direct = [direct] if isinstance(direct, str) else direct
        return set(direct).union(*(needs(d) for d in direct)) if direct else set()

    assert all(check in needs(n) for n in jobs if n != check), {n: needs(n) for n in jobs}
    assert "needs" not in jobs[check]
    (build,) = [n for n, r in runs.items() if re.search(r"^make book$", r, re.M)]
    for command in ("make pdf", "make course"):
        assert re.search(rf"^{command}$", runs[build], re.M), f"the build does not run {command}"
    assert "_build/pdf/maxmargin-book.pdf" in runs[build] and "course" in runs[build]
    writers = [n for n, j in jobs.items() if (j.get("permissions") or {}).get("contents") == "write"]
    assert writers and all("gh release create" in runs[n] for n in writers), writers
    (publish,) = writers
    assert build in needs(publish) and 'release.py notes "$GITHUB_REF_NAME"' in runs[publish]
    assert data["permissions"] == {"contents": "read"}


def test_zenodo_metadata_and_readme_say_what_to_do():
    """.zenodo.json is valid JSON with the book's title and licence (the version comes from the
    tag), and README.md's publishing section says what the maintainer does once and per release."""
    zenodo = json.loads((ROOT / ".zenodo.json").read_text())
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert zenodo["title"] == cff["title"] and zenodo["upload_type"] == "software"
    assert "version" not in zenodo, "the version comes from the tag (one source: pyproject.toml)"
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Publishing"):]
    assert "Zenodo" in section and "release.py check" in section and "releases/" in section


# ---------------------------------------------------------------- what counts as a change

def entry(text, raw, *, key="x", chapter="ch", page=None, fmt=".4f"):
    return {"chapter": chapter, "key": key, "format": fmt, "text": text, "raw": raw,
            "page": page or chapter, "anchor": f"num-{key}", "context": f"{key} is {text}."}


@pytest.mark.parametrize("old, new, changed", [
    (("0.1234", "0.12344999"), ("0.1235", "0.12345001"), False),  # rounding flip of the last digit
    (("0.1234", "0.1234"), ("0.1235", "0.1235"), True),           # moved one unit: a change
    (("0.1234", "0.12341"), ("0.1234", "0.12349"), False),        # same print
    (("51", "51"), ("50", "50"), True),                           # a count: every change
    (("51", "51"), ("39", "39"), True),
    (("92%", "0.92449"), ("93%", "0.92451"), False),              # percent: unit 1 of 100
    (("92%", "0.92"), ("93%", "0.93"), True),
    (("9.9e-06", "9.94999e-06"), ("1.0e-05", "9.95001e-06"), False),  # exponent changes
    (("1.2e-05", "1.2e-05"), ("1.4e-05", "1.4e-05"), True),
    (("0.9412", "np.float64(0.94124999)"), ("0.9413", "np.float64(0.94125001)"), False),
    (("0.1234", None), ("0.1235", None), False),                  # no full value: one unit is noise
    (("0.1234", None), ("0.1236", None), True),
    (("[1, 2]", "[1, 2]"), ("[1, 3]", "[1, 3]"), True),           # not a number: exact
])
def test_last_digit_rule(old, new, changed):
    assert is_change(entry(*old), entry(*new)) is changed


def test_diff_lists_every_change_and_nothing_else():
    """Planted: one number changed, one only flipped in its last digit, one removed, one added,
    one unchanged but printed on two pages, one glued and never printed that changed; one
    verdict changed, one removed, one added, one unchanged."""
    old = {"numbers": [entry("51", "51", key="count", fmt="d"),
                       entry("0.1234", "0.12344999", key="cos"),
                       entry("0.50", "0.5", key="gone", fmt=".2f"),
                       entry("7", "7", key="twice", fmt="d"),
                       entry("7", "7", key="twice", fmt="d", page="appendix"),
                       {**entry(None, "0.1", key="hidden"), "format": None}],
           "verdicts": [{"page": "appendix", "claim": "A", "verdict": "reproduced",
                         "anchor": "verdict-a", "context": "A | reproduced"},
                        {"page": "appendix", "claim": "B", "verdict": "reproduced",
                         "anchor": "verdict-b", "context": "B | reproduced"},
                        {"page": "appendix", "claim": "C", "verdict": "new proof",
                         "anchor": "verdict-c", "context": "C | new proof"}]}
    new = {"numbers": [entry("39", "39", key="count", fmt="d"),
                       entry("0.1235", "0.12345001", key="cos"),
                       entry("7", "7", key="twice", fmt="d", page="appendix"),
                       entry("7", "7", key="twice", fmt="d"),
                       entry("3.00", "3.0", key="fresh", fmt=".2f"),
                       {**entry(None, "0.2", key="hidden"), "format": None}],
           "verdicts": [{"page": "appendix", "claim": "A", "verdict": "**false**",
                         "anchor": "verdict-a", "context": "A | false"},
                        {"page": "appendix", "claim": "B", "verdict": "reproduced",
                         "anchor": "verdict-b", "context": "B | reproduced"},
                        {"page": "appendix", "claim": "D", "verdict": "deviates",
                         "anchor": "verdict-d", "context": "D | deviates"}]}
    got = {(c["kind"], c["change"], c["what"], c["old"], c["new"]) for c in diff_records(old, new)}
    assert got == {("number", "changed", "count", "51", "39"),
                   ("number", "removed", "gone", "0.50", None),
                   ("number", "added", "fresh", None, "3.00"),
                   ("verdict", "changed", "A", "reproduced", "**false**"),
                   ("verdict", "removed", "C", "new proof", None),
                   ("verdict", "added", "D", None, "deviates")}, got
    assert len(diff_records(old, new)) == len(got)
    (count,) = [c for c in diff_records(old, new) if c["what"] == "count"]
    assert (count["page"], count["anchor"]) == ("ch", "num-count")
    assert diff_records(new, new) == []
    assert [c["change"] for c in diff_records(None, new)] == ["added"] * 7


def test_previous_release_is_the_highest_below_this_one(tmp_path):
    for v in ("0.1.0", "0.1.9", "0.1.10", "0.2.0", "1.0.0"):
        (tmp_path / v).mkdir()
        (tmp_path / v / "numbers.json").write_text(json.dumps({"version": v}))
    assert previous_release(tmp_path, "0.2.0")[0] == "0.1.10"
    assert previous_release(tmp_path, "0.2.1") == ("0.2.0", {"version": "0.2.0"})
    assert previous_release(tmp_path, "0.1.0") is None
    assert previous_release(tmp_path / "none", "0.2.0") is None


# ------------------------------------------------------------------------- one version source

def test_one_version_source():
    """pyproject.toml's version is the only place the version is written: the library reads it
    (maxmargin.__version__), the site (_ext/booksite/release.py) and the landing page use the
    substitutions book_version and book_bibtex; no other file repeats the number by hand."""
    import maxmargin

    v = version()
    assert maxmargin.__version__ == v
    for name in ("lib/maxmargin/__init__.py", "_config.yml", "intro.md", "_ext/booksite/release.py",
                 ".zenodo.json"):
        assert v not in (ROOT / name).read_text(), f"{name} writes the version {v} by hand"
    intro = (ROOT / "intro.md").read_text()
    section = intro[intro.index("## Citing this book"):]
    assert "{{ book_version }}" in section and "\n{{ book_bibtex }}\n" in section


def test_book_bibtex_cites_this_version():
    """The landing page's BibTeX: this version, CITATION.cff's title, release year and URL."""
    from release import book_bibtex

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    fields = dict(re.findall(r"^\s+(\w+)\s*=\s*\{(.*)\},?$", book_bibtex(), re.M))
    assert fields["version"] == version() and fields["title"] == cff["title"]
    assert fields["year"] == cff["date-released"][:4] and fields["url"] == cff["url"]
    assert f"releases/tag/v{version()}" in fields["note"]
