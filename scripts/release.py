"""Releases of the book: release.py check TAG | notes TAG | keep [SITE].

    python scripts/release.py check v0.2.0   # may v0.2.0 be released? (exit 1 and the reasons if not)
    python scripts/release.py notes v0.2.0   # its release notes: the CHANGELOG section "## 0.2.0, ..."
    python scripts/release.py keep           # _build/html/_static/numbers.json -> releases/<version>/

The version has one source, ``[project] version`` of pyproject.toml (the library's and the
book's; the site shows it on every page, _ext/booksite/release.py). A tag ``vX.Y.Z`` may be
released only when pyproject.toml and CITATION.cff's ``version`` say X.Y.Z, CITATION.cff has a
``date-released`` and CHANGELOG.md a section ``## X.Y.Z ... (YYYY-MM-DD)`` of that date: the
release workflow (.github/workflows/release.yml) runs ``check`` before anything else.
``keep`` stores a build's record of its numbers and verdicts where the next release's
"Updates and corrections" page finds it (_ext/booksite/corrections.py).
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TAG = re.compile(r"v(\d+\.\d+\.\d+)")
SECTION = re.compile(r"^## (\d+\.\d+\.\d+)\b[^\n]*?\((\d{4}-\d{2}-\d{2})\)[^\n]*$", re.M)


def package_version(root: Path = ROOT) -> str:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def changelog_sections(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """version: (date, text of its section without the heading) of CHANGELOG.md."""
    text = (root / "CHANGELOG.md").read_text()
    heads = list(SECTION.finditer(text))
    sections = {}
    for m in heads:
        following = re.search(r"^## ", text[m.end():], re.M)
        end = m.end() + following.start() if following else len(text)
        sections[m.group(1)] = (m.group(2), text[m.end():end].strip() + "\n")
    return sections


def release_errors(tag: str, root: Path = ROOT) -> list[str]:
    """Why ``tag`` may not be released from ``root`` (empty: it may)."""
    m = TAG.fullmatch(tag)
    if not m:
        return [f"tag: {tag!r} is not of the form vX.Y.Z"]
    version, errors = m.group(1), []
    if (found := package_version(root)) != version:
        errors.append(f"pyproject.toml: version {found} is not the tag's {version}")
    cff = yaml.safe_load((root / "CITATION.cff").read_text())
    if str(cff.get("version")) != version:
        errors.append(f"CITATION.cff: version {cff.get('version')} is not the tag's {version}")
    released = cff.get("date-released")   # a quoted "YYYY-MM-DD" (the CFF schema's string)
    try:
        released = datetime.date.fromisoformat(str(released))
    except ValueError:
        errors.append(f"CITATION.cff: date-released {released!r} is not a date (YYYY-MM-DD)")
    section = changelog_sections(root).get(version)
    if section is None:
        errors.append(f"CHANGELOG.md: no section '## {version} ... (YYYY-MM-DD)'")
    elif isinstance(released, datetime.date) and section[0] != released.isoformat():
        errors.append(f"CHANGELOG.md: {version} is dated {section[0]}, CITATION.cff's "
                      f"date-released is {released.isoformat()}")
    return errors


def book_bibtex(root: Path = ROOT, version: str | None = None) -> str:
    """The BibTeX entry of this version of the book, from CITATION.cff and pyproject.toml's
    version (the landing page shows it as the substitution ``{{ book_bibtex }}``)."""
    cff = yaml.safe_load((root / "CITATION.cff").read_text())
    version = version or package_version(root)
    released = str(cff.get("date-released", ""))
    authors = " and ".join(a["name"] if "name" in a else
                           f"{a['family-names']}, {a['given-names']}" for a in cff["authors"])
    fields = [("title", cff["title"]), ("author", "{" + authors + "}"), ("version", version),
              ("year", released[:4]), ("date", released), ("url", cff["url"]),
              ("doi", cff.get("doi")),
              ("note", f"Release v{version}, {cff['repository-code']}/releases/tag/v{version}")]
    body = ",\n".join(f"  {name:<7} = {{{value}}}" for name, value in fields if value)
    return f"@software{{maxmarginbook_{version.replace('.', '_')},\n{body}\n}}"


def keep_record(site: Path, root: Path = ROOT) -> Path:
    """Copy the record ``numbers.json`` of the built ``site`` (its ``_static``) to
    ``releases/<version>/numbers.json`` of ``root``."""
    record = site / "_static" / "numbers.json"
    version = package_version(root)
    found = json.loads(record.read_text()).get("version")
    if found != version:
        raise SystemExit(f"{record}: the record of version {found}, not of {version}")
    target = root / "releases" / version / "numbers.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(record, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check").add_argument("tag")
    sub.add_parser("notes").add_argument("tag")
    keep = sub.add_parser("keep")
    keep.add_argument("site", nargs="?", type=Path, default=ROOT / "_build" / "html")
    args = parser.parse_args(argv)
    if args.command == "check":
        errors = release_errors(args.tag)
        for error in errors:
            print(f"release {args.tag}: {error}", file=sys.stderr)
        if not errors:
            print(f"release {args.tag}: tag, pyproject.toml, CITATION.cff and CHANGELOG.md agree")
        return 1 if errors else 0
    if args.command == "notes":
        version = args.tag.removeprefix("v")
        section = changelog_sections().get(version)
        if section is None:
            print(f"CHANGELOG.md: no section for {version}", file=sys.stderr)
            return 1
        print(section[1], end="")
        return 0
    print(f"wrote {keep_record(args.site)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
