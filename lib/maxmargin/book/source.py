"""Show a library function's source in a chapter: the plain reference next to its equation."""
from __future__ import annotations

import inspect
import re

from IPython.display import Markdown


def show(*functions) -> Markdown:
    """The source of each function as one highlighted Python code block.

    A Markdown object, so that the site, the PDF (through Sphinx's own highlighting) and an
    exported notebook all render it as code.

    Parameters
    ----------
    functions : one or more functions, e.g. ``mm.reference.gd_step``.

    Returns
    -------
    IPython.display.Markdown : a fenced ``python`` code block with their sources.

    Examples
    --------
    >>> import maxmargin as mm
    >>> block = show(mm.reference.descend)
    >>> block.data.splitlines()[:2]
    ['```python', 'def descend(x, g, lr, *, normalized=False, eps=1e-12):']
    """
    code = "\n\n".join(inspect.getsource(f).rstrip() for f in functions)
    fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", code)), default=0))
    return Markdown(f"{fence}python\n{code}\n{fence}")
