"""The GitHub Actions workflow builds and tests with the README's commands and publishes the site.

The workflow cannot run here; this test reads it (and dry-runs the Makefile) instead.
"""
from __future__ import annotations

import re
import subprocess

import yaml

from bookutils import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"
PAGES_ACTIONS = {"upload": "actions/upload-pages-artifact", "deploy": "actions/deploy-pages"}


def workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def runs(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def uses(job: dict, action: str) -> list[dict]:
    """The steps of ``job`` that use ``action`` (any version)."""
    return [step for step in job["steps"] if step.get("uses", "").split("@")[0] == action]


def job_running(command: str) -> tuple[str, dict]:
    jobs = workflow()["jobs"]
    found = [(name, job) for name, job in jobs.items()
             if any(re.search(rf"(^|\s){re.escape(command)}(\s|$)", run, re.M) for run in runs(job))]
    assert len(found) == 1, f"exactly one job must run `{command}`, found {[n for n, _ in found]}"
    return found[0]


def readme_commands() -> list[str]:
    """The commands of the first ```bash block of the README's "two commands" section."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^## [^\n]*[Tt]wo commands\n(?:(?!^## ).)*?^```bash\n(.*?)^```", text,
                      re.S | re.M)
    assert block, "README.md has no ```bash block under its '... two commands' section"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_workflow_runs_the_readme_commands():
    """One job runs each of the README's commands; the book job needs no browser."""
    commands = readme_commands()
    assert commands == ["make book", "make test"], commands
    _, book = job_running("make book")
    _, test = job_running("make test")
    assert not any("chromium" in run for run in runs(book)), "the book job installs chromium"
    assert any("chromium" in run for run in runs(test)), "the test job must install chromium"
    assert "debian" in str(test.get("container", {})).lower(), \
        "the test job needs Debian's chromium package: run it in a Debian container"


def test_workflow_publishes_the_built_site():
    """The book job keeps _build/html, the test job the PDF it prints after `make test`; one
    deploy job puts the PDF at the site's root (where intro.md links it) and publishes with the
    official Pages actions, only from main, only after the build and the tests pass."""
    data = workflow()
    book_name, book = job_running("make book")
    test_name, test = job_running("make test")
    site = [s for s in uses(book, "actions/upload-artifact")
            if s["with"]["path"].rstrip("/") == "_build/html"]
    assert len(site) == 1, "the book job must keep _build/html as an artifact"
    steps = [s.get("run", s.get("name", "")) for s in book["steps"]]
    assert steps.index("make book") < steps.index(site[0]["name"]), "upload before the build"
    test_steps = [s.get("run", "") for s in test["steps"]]
    assert test_steps.index("make test") < test_steps.index("make pdf")
    (pdf,) = [s for s in uses(test, "actions/upload-artifact")
              if s["with"]["path"] == "_build/pdf/maxmargin-book.pdf"]
    deploys = [(n, j) for n, j in data["jobs"].items() if uses(j, PAGES_ACTIONS["deploy"])]
    assert len(deploys) == 1, "one job deploys with actions/deploy-pages"
    _, deploy = deploys[0]
    downloads = {s["with"]["name"]: s["with"]["path"]
                 for s in uses(deploy, "actions/download-artifact")}
    (upload,) = uses(deploy, PAGES_ACTIONS["upload"])
    assert downloads == {site[0]["with"]["name"]: upload["with"]["path"],
                         pdf["with"]["name"]: upload["with"]["path"]}, downloads
    assert {book_name, test_name} <= set(deploy["needs"])
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert "refs/heads/main" in deploy["if"] and "pull_request" in deploy["if"]
    assert data["on"]["push"]["branches"] == ["main"]
    assert data["permissions"] == {"contents": "read"}, "least privilege outside the deploy job"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    pdf_url = config["html"]["baseurl"] + "maxmargin-book.pdf"
    assert pdf_url in (ROOT / "intro.md").read_text(), f"intro.md does not link {pdf_url}"
    for job in data["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]


def test_torch_is_cpu_only_and_installed_before_the_package():
    """Both jobs get TORCH_INDEX_URL (a CPU-only index); with it, the Makefile installs the
    pinned torch from that index before the package, so pip never fetches CUDA wheels."""
    data = workflow()
    assert data["env"]["TORCH_INDEX_URL"] == "${{ vars.TORCH_INDEX_URL }}"
    for command in ("make book", "make test"):
        _, job = job_running(command)
        guard = [run for run in runs(job) if "TORCH_INDEX_URL" in run and "exit 1" in run]
        assert guard, f"the `{command}` job must stop when TORCH_INDEX_URL is not set"
    pin = next(line for line in (ROOT / "constraints.txt").read_text().splitlines()
               if line.startswith("torch=="))
    dry = subprocess.run(["make", "-n", "-B", "-C", str(ROOT), ".venv/.installed",
                          "TORCH_INDEX_URL=https://cpu.index.invalid/whl"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    torch = [i for i, line in enumerate(dry) if "--index-url" in line]
    package = [i for i, line in enumerate(dry) if "-c constraints.txt" in line and "-e " in line
               and "[book,site,test]" in line]
    assert torch and package and torch[0] < package[0], "\n".join(dry)
    assert '"https://cpu.index.invalid/whl"' in dry[torch[0]] and f'"{pin}"' in dry[torch[0]]
    plain = subprocess.run(["make", "-n", "-B", "-C", str(ROOT), ".venv/.installed"],
                           capture_output=True, text=True, check=True).stdout
    assert "--index-url" not in plain, "without TORCH_INDEX_URL, torch comes with the package"


def test_readme_links_follow_the_repository_url():
    """README's site URL and Binder badge are built from the repository URL of _config.yml."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo, branch = config["repository"]["url"], config["repository"]["branch"]
    owner, name = repo.removeprefix("https://github.com/").split("/")
    readme = (ROOT / "README.md").read_text()
    site = f"https://{owner}.github.io/{name}/"
    assert f"<{site}>" in readme, f"README does not link the site {site}"
    binder = f"https://mybinder.org/v2/gh/{owner}/{name}/{branch}"
    assert re.search(r"\[!\[Binder\]\(https://mybinder\.org/badge_logo\.svg\)\]\("
                     + re.escape(binder), readme), f"README has no Binder badge for {binder}"
    assert config["parse"]["myst_substitutions"]["repo_url"] == repo, \
        "the pages' repo_url and the repository button must be the same URL (one anchor)"
    assert len(re.findall(r"https://github\.com/", (ROOT / "_config.yml").read_text())) == 1


def test_workflow_publishes_the_notebooks_colab_opens():
    """The book job keeps _build/html/notebooks/ (the exported notebooks the site's download
    buttons give) as an artifact; one job, only from main and after the tests, pushes them to
    the branch the Colab buttons open (booksite.launch.NOTEBOOK_BRANCH), with write access to
    contents and nothing else. Bugs caught: a Colab button pointing at a branch nobody writes,
    a publication from a pull request or before the tests pass, a token with more rights."""
    import sys

    sys.path.insert(0, str(ROOT / "_ext"))
    from booksite.launch import NOTEBOOK_BRANCH, NOTEBOOK_DIR

    data = workflow()
    _, book = job_running("make book")
    test_name, _ = job_running("make test")
    kept = uses(book, "actions/upload-artifact")
    kept = [s for s in kept if s["with"]["path"].rstrip("/") == f"_build/html/{NOTEBOOK_DIR}"]
    assert len(kept) == 1, "the book job must upload _build/html/notebooks as an artifact"
    artifact = kept[0]["with"]["name"]
    publishers = [(n, j) for n, j in data["jobs"].items()
                  if any(s.get("with", {}).get("name") == artifact
                         for s in uses(j, "actions/download-artifact"))]
    assert len(publishers) == 1, "one job downloads the notebooks artifact"
    _, job = publishers[0]
    assert {"build", test_name} <= set(job["needs"])
    assert job["permissions"] == {"contents": "write"}
    assert "refs/heads/main" in job["if"] and "pull_request" in job["if"]
    push = " ".join(runs(job))
    assert re.search(rf"git push .* {re.escape(NOTEBOOK_BRANCH)}\s*$", push.strip()), push
    assert f"git init -q -b {NOTEBOOK_BRANCH}" in push


def test_bare_make_lists_every_target_and_creates_nothing():
    """`make` alone is `make help`: every target of .PHONY with what it does, and no command
    but echo (a bare `make` used to create the 1.9-5.8 GB environment). Bug caught: a target
    added to the Makefile and missing from the help."""
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    shown = subprocess.run(["make", "-s", "-C", str(ROOT)], capture_output=True, text=True,
                           check=True).stdout
    listed = set(re.findall(r"make ([\w-]+)", shown))
    missing = [t for t in phony if t != "help" and t not in listed]
    assert not missing, f"make help does not list: {missing}"
    dry = subprocess.run(["make", "-n", "-C", str(ROOT)], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    commands = [line for line in dry if line.strip() and not line.startswith(("echo", "make"))]
    assert not commands, f"a bare make would run: {commands}"
