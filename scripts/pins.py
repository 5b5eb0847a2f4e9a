"""The exact versions the book is built and tested with (``constraints.txt``), and the part of
them that a reader's notebook needs (the library, its ``book`` extra and what they bring)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from bookutils import ROOT

# the extras a reader does not need: the site's toolchain, the tests, JupyterLab
_NOT_FOR_READERS = ("site", "test", "jupyter")


def constraints(root: Path = ROOT) -> dict[str, str]:
    """name -> version of every ``name==version`` line of constraints.txt, in file order."""
    pins = {}
    for number, line in enumerate((root / "constraints.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip():
            raise ValueError(f"constraints.txt:{number}: expected name==version, got {line!r}")
        pins[name.strip().lower()] = version.strip()
    return pins


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement.strip()).group(0).lower()


def reader_pins(root: Path = ROOT) -> dict[str, str]:
    """The pins of constraints.txt without the packages of the site, test and jupyter extras."""
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    others = {_name(r) for extra in _NOT_FOR_READERS for r in extras.get(extra, [])}
    return {name: version for name, version in constraints(root).items() if name not in others}
