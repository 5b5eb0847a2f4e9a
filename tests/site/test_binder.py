"""Binder: every launch button of the built site opens a file that postBuild writes.

Binder itself cannot be reached from here; this runs postBuild as repo2docker would, into a
temporary home folder (the folder JupyterLab serves), and checks every Binder launch URL of the
built HTML against it: the path after `urlpath=lab/tree/` exists, it is an exported notebook
without MyST, and only notebook pages (chapters and the landing page) have launch buttons.
postBuild's export reads the glued numbers from this session's fresh build, so it does not
execute the chapters again (on Binder it does).
"""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import nbformat
import pytest
import yaml

from bookutils import ROOT, chapter_notebooks

sys.path.insert(0, str(ROOT / "tests" / "notebooks"))
from residue import residue  # noqa: E402

LAUNCH = re.compile(r'href="(https://mybinder\.org/v2/[^"]+)"')


@pytest.fixture(scope="module")
def binder_home(built_html, tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("binder-home")
    env = dict(os.environ, BINDER_HOME=str(home), PYTHON=sys.executable)
    subprocess.run(["bash", str(ROOT / "postBuild")], check=True, env=env, cwd=ROOT,
                   capture_output=True, text=True)
    return home


def launch_urls(built_html: Path) -> dict[str, list[str]]:
    """Page (relative .html path) -> the Binder launch URLs in it."""
    urls = {}
    for page in sorted(built_html.rglob("*.html")):
        found = [html.unescape(u) for u in LAUNCH.findall(page.read_text(encoding="utf8"))]
        if found:
            urls[page.relative_to(built_html).as_posix()] = found
    return urls


def test_every_launch_url_opens_an_exported_notebook(built_html, binder_home):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    urls = launch_urls(built_html)
    pages = {p.relative_to(ROOT).with_suffix(".html").as_posix() for p in chapter_notebooks()}
    assert set(urls) == pages, (f"launch buttons on {sorted(set(urls) - pages)}, "
                                f"missing on {sorted(pages - set(urls))}")
    for page, found in urls.items():
        for url in found:
            path = parse_qs(urlparse(url).query)["urlpath"][0]
            assert path.startswith("lab/tree/"), url
            target = binder_home / path.removeprefix("lab/tree/")
            assert target.suffix == ".ipynb" and target.exists(), \
                f"{page}: the launch URL opens {path}, which postBuild did not write"
            nb = nbformat.read(target, as_version=4)
            nbformat.validate(nb)
            assert Path(page).stem == target.stem
            text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
            assert residue(text) == [], f"{target.name}: {residue(text)}"
    exported = sorted(p.name for p in (binder_home / "notebooks").iterdir())
    assert exported == sorted(f"{p.stem}.ipynb" for p in chapter_notebooks()), \
        "postBuild writes the notebook pages and nothing else (README, CONTRIBUTING stay .md)"
