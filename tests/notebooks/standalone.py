"""Static checks that a chapter runs standalone: re-running a cell after the exercises gives
the same output (CONTRIBUTING.md, "Notebook export", "Standalone chapters")."""
from __future__ import annotations

import ast
from dataclasses import dataclass

from gates import CHECK_TAG, STUB_TAG, scan

# np.random functions that draw from the global state (default_rng & co. do not).
SEEDED_FACTORIES = {"default_rng", "Generator", "SeedSequence", "PCG64", "PCG64DXSM",
                    "MT19937", "Philox", "SFC64", "BitGenerator"}
TORCH_DRAWS = {"rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like",
               "randint_like", "bernoulli", "multinomial", "poisson"}


@dataclass
class Cell:
    index: int
    source: str
    exercise: bool          # a stub, a solution cell or a check
    glue: bool = False      # a hidden glue cell (tag `glue`): never in a reader's notebook


def code_cells(nb) -> list[Cell]:
    """The code cells of a page, marked when they belong to an exercise."""
    _, exercises = scan(nb)
    solutions = {s for e in exercises.values() for s in e.solutions}
    cells, k = [], 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        cells.append(Cell(k, cell.source, STUB_TAG in tags or CHECK_TAG in tags
                          or cell.source in solutions, "glue" in tags))
        k += 1
    return cells


def _bound(tree: ast.AST) -> set[str]:
    """Names a statement (or a cell) binds in the notebook's namespace: assignments, loop
    targets, imports, definitions; not the locals of functions, classes or comprehensions."""
    names = set()
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
              ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, scopes) and node is not tree:
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.NamedExpr):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _free_reads(tree: ast.Module) -> set[str]:
    """Names a cell reads from the namespace before (or without) binding them itself,
    following the order of execution (a value before its targets, a loop's iterable before
    its variable, a comprehension's variables local to it)."""
    bound: set[str] = set()
    read: set[str] = set()

    def visit(node: ast.AST, local: frozenset = frozenset()) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                if node.id not in bound and node.id not in local:
                    read.add(node.id)
            elif not local or node.id not in local:
                bound.add(node.id)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            if node.value is not None:
                visit(node.value, local)
            for target in getattr(node, "targets", None) or [node.target]:
                visit(target, local)
        elif isinstance(node, ast.AugAssign):
            visit(node.value, local)
            if isinstance(node.target, ast.Name) and node.target.id not in bound | local:
                read.add(node.target.id)
            visit(node.target, local)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            visit(node.iter, local)
            visit(node.target, local)
            for stmt in node.body + node.orelse:
                visit(stmt, local)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = set(local)
            for gen in node.generators:
                visit(gen.iter, frozenset(inner))
                inner |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
                for cond in gen.ifs:
                    visit(cond, frozenset(inner))
            for part in ([node.key, node.value] if isinstance(node, ast.DictComp)
                         else [node.elt]):
                visit(part, frozenset(inner))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in node.args.defaults + node.args.kw_defaults:
                if default is not None:
                    visit(default, local)
            for decorator in getattr(node, "decorator_list", []):
                visit(decorator, local)
            args = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
            body = node.body if isinstance(node.body, list) else [node.body]
            own = _bound(ast.Module(body=[b for b in body if isinstance(b, ast.stmt)],
                                    type_ignores=[])) | args
            for stmt in body:
                visit(stmt, frozenset(local | own))
            if not isinstance(node, ast.Lambda):
                bound.add(node.name)
        elif isinstance(node, ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, local)

    for stmt in tree.body:
        visit(stmt)
    return read


def overwritten_reads(cells: list[Cell]) -> list[str]:
    """Non-exercise cells that read a name an exercise cell binds.

    Re-running such a cell after the exercises sees the exercise's value instead of its own
    page's (and a student's unfinished exercise can break it). Exercise cells must bind only
    names of their own (``inst_ex``, ``mine``, ...)."""
    exercise_names: dict[str, int] = {}
    for cell in cells:
        if cell.exercise:
            for name in _bound(ast.parse(cell.source)):
                exercise_names.setdefault(name, cell.index)
    problems = []
    for cell in cells:
        if cell.exercise:
            continue
        for name in sorted(_free_reads(ast.parse(cell.source)) & set(exercise_names)):
            problems.append(f"code cell {cell.index} reads {name!r}, which exercise cell "
                            f"{exercise_names[name]} binds")
    return problems


def global_rng_uses(cells: list[Cell]) -> list[str]:
    """Draws from numpy's, torch's or random's global state, and generators created in one
    cell and drawn from in another (a re-run of that cell would draw other numbers)."""
    problems = []
    generators: dict[str, int] = {}
    for cell in cells:
        tree = ast.parse(cell.source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if ast.unparse(node.value.func).endswith(
                        ("default_rng", "Generator", ".manual_seed")):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            generators[target.id] = cell.index
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            func = node.func
            owner = ast.unparse(func.value)
            if owner in ("np.random", "numpy.random") and func.attr not in SEEDED_FACTORIES:
                problems.append(f"code cell {cell.index}: {owner}.{func.attr} uses the global "
                                "state")
            if owner == "torch" and (func.attr == "manual_seed" or func.attr in TORCH_DRAWS
                                     and not any(k.arg == "generator" for k in node.keywords)):
                problems.append(f"code cell {cell.index}: torch.{func.attr} uses the global "
                                "state")
            if owner == "random":
                problems.append(f"code cell {cell.index}: random.{func.attr} uses the global "
                                "state")
            if isinstance(func.value, ast.Name) and func.value.id in generators \
                    and generators[func.value.id] != cell.index:
                problems.append(f"code cell {cell.index} draws from {func.value.id}, created in "
                                f"code cell {generators[func.value.id]}")
    return problems


def rebound_later(cells: list[Cell]) -> list[str]:
    """Cells that read a name a later cell binds again: re-run after the notebook, such a
    cell computes with the later value (a loop variable `R`, a second `layer`, ...). Glue
    cells are not asked: they run once, in order, on the site, and no reader has them."""
    binds = [_bound(ast.parse(cell.source)) for cell in cells]
    problems = []
    for k, cell in enumerate(cells):
        if cell.glue:
            continue
        for name in sorted(_free_reads(ast.parse(cell.source))):
            later = next((cells[j].index for j in range(k + 1, len(cells))
                          if name in binds[j]), None)
            if later is not None:
                problems.append(f"code cell {cell.index} reads {name!r}, which code cell "
                                f"{later} binds again")
    return problems
