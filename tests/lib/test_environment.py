"""The three version lists agree: pyproject.toml (the ranges the library needs), constraints.txt
(the exact versions the book is built and tested with) and environment.yml (Binder, conda); and
the environment under test is the pinned one."""
import importlib.metadata
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CONDA_TO_PIP = {"pytorch": "torch", "matplotlib-base": "matplotlib", "cvxpy-base": "cvxpy"}
SITE_TOOLCHAIN = {"jupyter-book", "sphinx", "sphinx-proof", "sphinx-exercise"}
CORE = {"numpy", "scipy", "torch", "cvxpy", "numba"}
BOOK = {"matplotlib", "ipywidgets", "jupytext"}
# Binder's postBuild exports the chapters (scripts/make_notebooks.py): it executes their hidden
# glue cells and formats the glued numbers with myst-nb; the notebooks it writes never import it
EXPORT = {"myst-nb"}
BROUGHT = {"clarabel": "cvxpy", "llvmlite": "numba"}  # pinned, required by a dependency


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def requirements() -> dict[str, Requirement]:
    """Every requirement of pyproject.toml, its dependencies and all its extras, by name."""
    found = [Requirement(r) for r in project()["dependencies"]]
    for extra in project()["optional-dependencies"].values():
        found += [Requirement(r) for r in extra]
    return {r.name.lower(): r for r in found}


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and name.strip().lower() not in pins, f"constraints.txt: {line!r}"
            pins[name.strip().lower()] = version.strip()
    return pins


def conda_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pins = {}
    for spec in env["dependencies"]:
        if isinstance(spec, dict) or spec == "pip" or spec.startswith("python="):
            continue  # the interpreter and pip are not library pins
        name, version = spec.split("=")[:2]
        pins[CONDA_TO_PIP.get(name, name).lower()] = version
    return pins


def test_the_core_needs_only_the_mathematics():
    """Bug caught: a drawing or build package (matplotlib, myst-nb...) back among the library's
    own requirements, or a core package pinned with == for the library's users; myst-nb back
    in the `book` extra (every reader's notebook installed Sphinx, docutils, jupyter-cache and
    SQLAlchemy with it, for glue calls that the exported notebooks do not hold)."""
    core = [Requirement(r) for r in project()["dependencies"]]
    assert {r.name for r in core} == CORE
    assert {r.name for r in map(Requirement, project()["optional-dependencies"]["book"])} == BOOK
    site = {r.name for r in map(Requirement, project()["optional-dependencies"]["site"])}
    assert EXPORT <= site, "myst-nb belongs to the site's toolchain"
    for r in core:
        assert not any(s.operator in ("==", "===") for s in r.specifier), f"{r} is pinned"


def test_every_requirement_has_one_pin_inside_its_range():
    """Bug caught: a range raised in pyproject.toml (or a pin moved in constraints.txt) so that
    `make` would install a version the library does not declare it supports, or a package that
    `make` installs at whatever version the index has today."""
    pins, needed = constraints(), requirements()
    assert set(needed) | set(BROUGHT) == set(pins), (set(needed) ^ set(pins)) - set(BROUGHT)
    for name, requirement in needed.items():
        assert Version(pins[name]) in requirement.specifier, f"{name}=={pins[name]} vs {requirement}"
    for name, parent in BROUGHT.items():
        wanted = [Requirement(r) for r in importlib.metadata.requires(parent) if
                  Requirement(r).name.lower() == name and not Requirement(r).marker]
        assert wanted and all(Version(pins[name]) in r.specifier for r in wanted), (name, wanted)


def test_the_environment_under_test_is_the_pinned_one():
    """Bug caught: tests passing on versions other than the pinned ones (a stale .venv, an
    install without -c constraints.txt), so that a green run says nothing about the pins."""
    wrong = {}
    for name, pin in constraints().items():
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            if name == "jupyterlab":  # the `jupyter` extra, which `make` does not install
                continue
            raise
        if Version(installed.public) != Version(pin):  # torch 2.13.0+cpu is torch 2.13.0
            wrong[name] = (str(installed), pin)
    assert not wrong, f"installed vs constraints.txt: {wrong}"


def test_binder_pins_are_the_constraints():
    """Binder runs the library and the chapters (the `book` extra) at the pinned versions, and
    postBuild's export of the notebooks (myst-nb)."""
    pins, conda = constraints(), conda_pins()
    assert set(conda) == CORE | BOOK | EXPORT | set(BROUGHT) | {"jupyterlab"}, set(conda)
    mismatched = {name: (pins[name], conda[name]) for name in conda if pins[name] != conda[name]}
    assert not mismatched, f"constraints.txt vs environment.yml: {mismatched}"


def test_binder_environment_is_cpu_only_and_small():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    specs = [s for s in env["dependencies"] if isinstance(s, str)]
    assert f"pytorch={constraints()['torch']}=cpu_*" in specs, "PyTorch must be the CPU build"
    names = {s.split("=")[0] for s in specs}
    assert not names & SITE_TOOLCHAIN, f"the book toolchain does not belong in Binder: {names & SITE_TOOLCHAIN}"
    python = next(s for s in specs if s.startswith("python="))
    assert project()["requires-python"] == ">=" + python.split("=")[1]


def test_binder_post_build_sets_no_default_viewer():
    """Binder opens exported notebooks (postBuild, tests/site/test_binder.py); no JupyterLab
    override that would open every .md, README and CONTRIBUTING included, as a notebook."""
    text = (ROOT / "postBuild").read_text()
    assert "defaultViewers" not in text and "make_notebooks.py" in text
