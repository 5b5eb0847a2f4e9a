"""The book's one MyST reader: myst-parser's own markdown-it parser, configured as the site is.

The export (:mod:`export`), the index of labels (:mod:`bookindex`) and the exercise gates
(:mod:`gates`) read MyST through :func:`blocks` (the build extension, ``_ext/booksite``, reads
chapters with myst-nb's own reader), so that they see the same directives, targets and
labelled equations as the built site: a line
that looks like a directive inside a code block, or a ``$$`` that continues a paragraph, is what
myst-parser says it is, not what a regular expression guesses.
"""
from __future__ import annotations

import functools
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser

ROOT = Path(__file__).resolve().parents[1]

# The directives whose body is code or math, not MyST: never searched for nested blocks.
LITERAL = {"code-cell", "code-block", "code", "sourcecode", "math", "raw", "eval-rst"}


@dataclass(frozen=True)
class Block:
    """One construct of a MyST text.

    ``kind``: "directive" (``name``, ``arg``, ``options``, ``body``), "code" (a plain code
    fence), "target" (``name`` = the label of ``(label)=``), "comment" (``%``), "break"
    (``+++``), "text" (a paragraph, list, table, quote... at the top level; a block nested in
    it follows it), "math" (a ``$$`` or amsmath display; ``name`` = its label or ""; ``body`` = its
    lines, dedented), "heading" (``name`` = its text, ``level``). ``start``/``stop``: its 0-based lines in
    the text, ``stop`` exclusive (for a nested block, the lines of its parent's text).
    """

    kind: str
    start: int
    stop: int
    name: str = ""
    arg: str = ""
    options: dict = field(default_factory=dict)
    body: tuple[str, ...] = ()
    level: int = 0


@functools.lru_cache(maxsize=None)
def _parser(extensions: tuple[str, ...]):
    config = MdParserConfig(enable_extensions=set(extensions))
    return create_md_parser(config, RendererHTML)


def site_extensions(root: Path = ROOT) -> tuple[str, ...]:
    """The MyST extensions ``_config.yml`` enables for the site (``parse: myst_enable_extensions``)."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    return tuple(sorted((config.get("parse") or {}).get("myst_enable_extensions") or ()))


def directive_options(body: list[str]) -> tuple[dict, list[str]]:
    """The options of a directive body (a ``---`` yaml block or ``:key: value`` lines) and the
    remaining body, as myst-parser reads them."""
    if body and body[0].strip() == "---":
        end = next((k for k in range(1, len(body)) if body[k].strip() == "---"), None)
        if end is None:
            raise ValueError(f"a directive's yaml options never close: {body[0]!r} ...")
        return dict(yaml.safe_load("\n".join(body[1:end])) or {}), body[end + 1:]
    options: dict = {}
    while body and re.match(r"^\s*:[\w-]+:", body[0]):
        key, _, value = body[0].strip()[1:].partition(":")
        options[key] = value.strip()
        body = body[1:]
    return options, body


def _directive(token) -> tuple[str, str] | None:
    """(name, argument) of a fence token that opens a directive, else None."""
    found = re.match(r"^\{(?P<name>[^}\s]+)\}\s*(?P<arg>.*?)\s*$", token.info.strip())
    return (found["name"], found["arg"]) if found else None


def blocks(text: str, *, extensions: tuple[str, ...] | None = None) -> list[Block]:
    """The constructs of ``text`` at any depth of lists and quotes (not inside a directive's
    body: parse that with another call), in reading order."""
    md = _parser(site_extensions() if extensions is None else extensions)
    found: list[Block] = []
    tokens = md.parse(text)
    lines = text.splitlines()
    for k, token in enumerate(tokens):
        if token.map is None:
            continue
        start, stop = token.map
        if token.type in ("fence", "colon_fence"):
            closing = re.sub(r"^[\s>]*", "", lines[stop - 1]).strip() if stop - 1 > start else ""
            if not (closing and set(closing) == {token.markup[0]}
                    and len(closing) >= len(token.markup)):
                raise ValueError(f"a fence never closes: {lines[start].strip()!r} "
                                 f"(line {start + 1})")
            opened = _directive(token)
            if opened is None:
                found.append(Block("code", start, stop, arg=token.info))
                continue
            options, body = directive_options(token.content.splitlines())
            found.append(Block("directive", start, stop, opened[0], opened[1], options,
                               tuple(body)))
        elif token.type == "myst_target":
            found.append(Block("target", start, stop, token.content.strip()))
        elif token.type == "myst_line_comment":
            found.append(Block("comment", start, stop))
        elif token.type == "myst_block_break":
            found.append(Block("break", start, stop))
        elif token.type in ("math_block", "math_block_label", "amsmath"):
            label = token.info.strip() if token.type == "math_block_label" else ""
            body = textwrap.dedent(token.content).strip().splitlines()
            found.append(Block("math", start, stop, label, body=tuple(body),
                               arg=token.type))
        elif token.level == 0 and (token.type.endswith("_open") and token.type != "heading_open"
                                   or token.type in ("html_block", "hr", "code_block")):
            found.append(Block("text", start, stop))
        elif token.type == "heading_open":
            found.append(Block("heading", start, stop, tokens[k + 1].content.strip(),
                               level=int(token.tag[1:])))
    return found


def walk(text: str, *, extensions: tuple[str, ...] | None = None):
    """Every block of ``text`` and, depth first, of the MyST bodies of its directives (those
    not in :data:`LITERAL`), in reading order."""
    for block in blocks(text, extensions=extensions):
        yield block
        if block.kind == "directive" and block.name not in LITERAL:
            yield from walk("\n".join(block.body), extensions=extensions)
