"""CITATION.cff is valid CFF 1.2.0, cites the book and points to the paper; the licences exist."""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jsonschema
import yaml

from bookutils import ROOT

SCHEMA = Path(__file__).parent / "data" / "cff-1.2.0.schema.json"  # origin: data/README.md
PAPER_KEY = "tarzanagh2023maxmargin"


def citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def bibtex_entry(text: str, key: str) -> str:
    """The BibTeX entry ``key`` of ``text``, from its @type line to its closing brace."""
    match = re.search(r"^@\w+\{" + re.escape(key) + r",.*?^\}", text, re.S | re.M)
    assert match, f"no BibTeX entry {key!r}"
    return match.group(0)


def test_citation_is_valid_cff():
    """The file validates against the vendored CFF 1.2.0 schema (with its format checks)."""
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(citation()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_schema_rejects_an_invalid_file():
    """The schema check can fail: a file without authors or with a bad licence is invalid."""
    schema = json.loads(SCHEMA.read_text())
    broken = dict(citation(), license="MIT-or-so")
    del broken["authors"]
    assert len(list(jsonschema.Draft7Validator(schema).iter_errors(broken))) >= 2


def test_citation_matches_the_project():
    """Version, licences, repository and site URL agree with pyproject.toml and _config.yml."""
    cff = citation()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    repo = config()["repository"]["url"]
    assert cff["version"] == project["version"]
    assert set(cff["license"]) == {"MIT", "CC-BY-4.0"}
    assert cff["repository-code"] == repo
    owner, name = repo.removeprefix("https://github.com/").split("/")
    assert cff["url"] == f"https://{owner}.github.io/{name}/"


def test_citation_points_to_the_paper():
    """The reference is the paper of references.bib: title, year, volume, pages, arXiv id."""
    bib = bibtex_entry((ROOT / "references.bib").read_text(), PAPER_KEY)
    field = {k: v for k, v in re.findall(r"^\s*(\w+)\s*=\s*\{(.*)\},?\s*$", bib, re.M)}
    (paper,) = [r for r in citation()["references"] if r["title"] == field["title"]]
    assert str(paper["year"]) == field["year"] and str(paper["volume"]) == field["volume"]
    assert f'{paper["start"]}--{paper["end"]}' == field["pages"]
    assert paper["url"].endswith(field["eprint"]) and paper["doi"].endswith(field["eprint"])
    families = [a["family-names"] for a in paper["authors"]]
    assert families == re.findall(r"(\w+),", field["author"]), families


def test_licences_exist_and_are_named():
    """LICENSE is MIT (as pyproject.toml says), LICENSE-CONTENT is CC BY 4.0; README and the
    landing page name both."""
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"] == "MIT"
    content = (ROOT / "LICENSE-CONTENT").read_text()
    assert "Creative Commons Attribution 4.0 International Public License" in content
    for page in ("README.md", "intro.md"):
        text = (ROOT / page).read_text()
        for needle in ("MIT", "CC BY 4.0", "LICENSE", "LICENSE-CONTENT"):
            assert needle in text, f"{page} does not name {needle!r}"


def test_landing_page_shows_the_papers_bibtex():
    """intro.md shows the paper's BibTeX exactly as references.bib has it."""
    entry = bibtex_entry((ROOT / "references.bib").read_text(), PAPER_KEY)
    blocks = re.findall(r"^```bibtex\n(.*?)^```$", (ROOT / "intro.md").read_text(), re.S | re.M)
    assert any(block.strip() == entry.strip() for block in blocks), \
        "intro.md needs a ```bibtex block identical to the references.bib entry"
