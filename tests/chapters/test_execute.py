"""Each toc page with code executes from scratch, within its time budget, and reproducibly."""
from __future__ import annotations

import base64
import io

import pytest
from chapter_exec import BUDGET_S, execute

from bookutils import has_code_cells, in_ci, source_path, toc_docnames

PAGES = [name for name in toc_docnames() if has_code_cells(source_path(name))]
REPRODUCED_CHAPTER = "chapters/01-attention-model"


def output_problems(nb) -> list[str]:
    """Convention breaches visible only after execution: figure alt text, opacity, glue types."""
    from PIL import Image

    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        options = cell.metadata.get("mystnb", {})
        displays = [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
        pngs = [o.data["image/png"] for o in displays if "image/png" in o.get("data", {})]
        if pngs and not options.get("image", {}).get("alt"):
            problems.append(f"cell {index}: an image output needs `mystnb: image: alt:` text")
        for png in pngs:
            image = Image.open(io.BytesIO(base64.b64decode(png)))
            if "A" in image.getbands() and image.getchannel("A").getextrema()[0] < 255:
                problems.append(f"cell {index}: the figure has a transparent background")
        if "figure" in options and len(displays) != 1:
            problems.append(f"cell {index}: a figure cell must display exactly one output, "
                            f"it displayed {len(displays)}")
        for out in displays:
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            plain = next((v for k, v in out.data.items() if k.endswith("text/plain")), "")
            if name and plain.startswith("np."):
                problems.append(f"cell {index}: glue {name!r} holds a numpy scalar ({plain}); "
                                "glue float(x) or int(x)")
    return problems


def glued_values(nb) -> dict[str, dict]:
    """Every myst-nb glue output of an executed notebook: name -> mime bundle."""
    return {out.metadata["scrapbook"]["name"]: dict(out.data)
            for cell in nb.cells if cell.cell_type == "code"
            for out in cell.outputs if "scrapbook" in out.get("metadata", {})}


@pytest.mark.chapter
@pytest.mark.parametrize("docname", PAGES)
def test_chapter_runs_clean(docname, record_chapter):
    """The chapter executes, within budget, and its outputs follow the figure and glue rules."""
    nb, seconds, failure = execute(source_path(docname))
    record_chapter(docname, seconds, "failed" if failure else "passed")
    if failure:
        pytest.fail(f"{docname} failed to execute: {failure}", pytrace=False)
    assert seconds <= BUDGET_S, f"{docname} took {seconds:.1f} s; the budget is {BUDGET_S:.0f} s"
    problems = output_problems(nb)
    assert not problems, f"{docname}:\n" + "\n".join(problems)


@pytest.mark.chapter
def test_glued_numbers_are_reproducible():
    """Two fresh executions of chapter 01 glue identical values."""
    path = source_path(REPRODUCED_CHAPTER)
    runs = []
    for _ in range(2):
        nb, _, failure = execute(path)
        if failure:
            pytest.fail(f"{REPRODUCED_CHAPTER} failed to execute: {failure}", pytrace=False)
        runs.append(glued_values(nb))
        if not runs[0]:
            message = (f"{REPRODUCED_CHAPTER} glues no values yet, so there is nothing to compare; "
                       "chapters must glue their checked numbers (CONTRIBUTING.md)")
            if in_ci():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
    first, second = runs
    differ = sorted(k for k in first.keys() | second.keys() if first.get(k) != second.get(k))
    assert not differ, f"glued values differ between two runs: {differ}"
