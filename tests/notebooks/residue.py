"""MyST left in exported Markdown, as a reader of a plain Jupyter would see it."""
from __future__ import annotations

import re

from markdown_it import MarkdownIt

# What a MyST construct leaves behind when a plain renderer shows it.
RESIDUE = [
    ("a glue role or directive", re.compile(r"\{glue")),
    ("a sphinx-proof directive or role", re.compile(r"\{prf:")),
    ("a {doc} role", re.compile(r"\{doc\}")),
    ("a colon-fenced directive", re.compile(r":::")),
    ("a directive fence", re.compile(r"```\s*\{")),
    ("a target (label)=", re.compile(r"^\([\w:.-]+\)=\s*$", re.M)),
    ("a citation role", re.compile(r"\{cite")),
    ("a {ref} role", re.compile(r"\{ref\}")),
    ("a {numref} role", re.compile(r"\{numref\}")),
    ("an {eq} role", re.compile(r"\{eq\}")),
    ("a role followed by its content", re.compile(r"\{[\w:+-]+\}(`|<code>)")),
    ("an equation label after $$", re.compile(r"\$\$\s*\([\w:.-]+\)")),
    ("a directive option line", re.compile(r"^>?\s*:(label|class|tags|name|nonumber):", re.M)),
    ("an unfilled placeholder", re.compile(r"%s|\{number\}|\{name\}|\?\?\?")),
    ("a MyST cell break", re.compile(r"^\+\+\+\s*$", re.M)),
    ("an unrendered {{ substitution }}", re.compile(r"\{\{.*?\}\}", re.S)),
]

_RENDERER = MarkdownIt("commonmark").enable("table")


def render(markdown: str) -> str:
    """HTML of ``markdown`` as a plain CommonMark renderer with GFM tables shows it."""
    return _RENDERER.render(markdown)


def _without_code(markdown: str) -> str:
    """The Markdown minus fenced code blocks (which show code as it is, MyST included)."""
    tokens = _RENDERER.parse(markdown)
    lines = markdown.splitlines()
    for token in tokens:
        if token.type in ("fence", "code_block") and token.map:
            for k in range(*token.map):
                lines[k] = ""
    return "\n".join(lines)


def residue(markdown: str) -> list[str]:
    """What looks like MyST in ``markdown`` (its source and its rendered HTML), outside code
    blocks: a list of 'what: excerpt' strings, empty when clean."""
    text = _without_code(markdown)
    found = []
    for what, pattern in RESIDUE:
        for source in (text, render(text)):
            m = pattern.search(source)
            if m:
                excerpt = source[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
                found.append(f"{what}: ...{excerpt}...")
                break
    return found
