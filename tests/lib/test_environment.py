"""The conda environment (Binder) and the pip pins (pyproject.toml) must name the same versions."""
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONDA_TO_PIP = {"pytorch": "torch", "matplotlib-base": "matplotlib", "cvxpy-base": "cvxpy"}
BOOK_TOOLCHAIN = {"jupyter-book", "sphinx", "sphinx-proof", "sphinx-exercise"}


def pip_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for requirement in project["dependencies"]:
        name, sep, version = requirement.partition("==")
        assert sep, f"pyproject.toml: runtime dependency {requirement!r} is not pinned with =="
        pins[name.strip().lower()] = version.strip()
    return pins


def conda_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pins = {}
    for spec in env["dependencies"]:
        if isinstance(spec, dict) or spec == "pip" or spec.startswith(("python=", "jupyterlab")):
            continue  # the interpreter, pip and the Binder front end are not library pins
        name, version = spec.split("=")[:2]
        pins[CONDA_TO_PIP.get(name, name).lower()] = version
    return pins


def test_every_runtime_pin_agrees():
    pip, conda = pip_pins(), conda_pins()
    assert set(conda) == set(pip), f"packages differ: only pip {set(pip) - set(conda)}, only conda {set(conda) - set(pip)}"
    mismatched = {name: (pip[name], conda[name]) for name in pip if pip[name] != conda[name]}
    assert not mismatched, f"pip vs conda versions differ: {mismatched}"


def test_binder_environment_is_cpu_only_and_small():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    specs = [s for s in env["dependencies"] if isinstance(s, str)]
    assert "pytorch=2.13.0=cpu_*" in specs, "PyTorch must be the CPU build"
    names = {s.split("=")[0] for s in specs}
    assert not names & BOOK_TOOLCHAIN, f"the book toolchain does not belong in Binder: {names & BOOK_TOOLCHAIN}"
    python = next(s for s in specs if s.startswith("python="))
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=" + python.split("=")[1]


def test_jupyterlab_pin_agrees():
    """Binder's JupyterLab (environment.yml) is the one of the `jupyter` extra of pyproject.toml."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [s for s in env["dependencies"] if isinstance(s, str) and s.startswith("jupyterlab")]
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["jupyter"]
    assert conda == ["jupyterlab=" + extra[0].split("==")[1]] and extra[0].startswith(
        "jupyterlab=="), f"environment.yml {conda} vs pyproject.toml {extra}"


def test_binder_post_build_sets_no_default_viewer():
    """Binder opens exported notebooks (postBuild, tests/site/test_binder.py); no JupyterLab
    override that would open every .md, README and CONTRIBUTING included, as a notebook."""
    text = (ROOT / "postBuild").read_text()
    assert "defaultViewers" not in text and "make_notebooks.py" in text
