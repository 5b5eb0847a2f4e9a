"""The book's BibTeX file, read without a BibTeX library, for author-year citations."""
from __future__ import annotations

import re
from pathlib import Path


def read_bib(path: Path) -> dict[str, dict[str, str]]:
    """Entries of a BibTeX file: key -> fields (lower-case names, braces removed)."""
    text = path.read_text(encoding="utf8")
    entries = {}
    for m in re.finditer(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", text):
        depth, j = 1, m.end()
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        body = text[m.end():j - 1]
        fields = {"type": m[1].lower()}
        for f in re.finditer(r"(\w+)\s*=\s*", body):
            k = f.end()
            if body[k] == "{":
                depth, end = 1, k + 1
                while depth:
                    depth += {"{": 1, "}": -1}.get(body[end], 0)
                    end += 1
                value = body[k + 1:end - 1]
            else:
                value = re.match(r'"([^"]*)"|([^,\s]+)', body[k:]).group(0).strip('"')
            fields[f[1].lower()] = re.sub(r"\s+", " ", value.replace("{", "").replace("}", ""))
        entries[m[2]] = fields
    return entries


def _surnames(entry: dict[str, str]) -> list[str]:
    return [a.split(",")[0].strip() if "," in a else a.split()[-1]
            for a in entry.get("author", "Anonymous").split(" and ")]


def cite_labels(bib: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    """Key -> (authors, year) for author-year citations; equal labels get 2023a, 2023b."""
    base = {}
    for key, entry in bib.items():
        names = _surnames(entry)
        authors = (names[0] if len(names) == 1 else f"{names[0]} and {names[1]}"
                   if len(names) == 2 else f"{names[0]} et al.")
        base[key] = (authors, entry.get("year", "n.d."))
    labels = {}
    for key, (authors, year) in base.items():
        same = [k for k, v in base.items() if v == (authors, year)]
        suffix = "abcdefghijklmnopqrstuvwxyz"[same.index(key)] if len(same) > 1 else ""
        labels[key] = (authors, year + suffix)
    return labels


def reference_entry(key: str, entry: dict[str, str], label: tuple[str, str]) -> str:
    """One line of the reference list, in Markdown."""
    authors = ", ".join(a.strip() if "," not in a else
                        " ".join(reversed([p.strip() for p in a.split(",", 1)]))
                        for a in entry.get("author", "").split(" and "))
    venue = entry.get("booktitle") or entry.get("journal") or (
        f"arXiv:{entry['eprint']}" if entry.get("eprint") else "")
    parts = [f"**[{label[0]} {label[1]}]** {authors}.", f"*{entry.get('title', key)}*."]
    if venue:
        parts.append(f"{venue}, {entry.get('year', '')}.")
    if entry.get("url"):
        parts.append(f"<{entry['url']}>")
    return " ".join(parts)
