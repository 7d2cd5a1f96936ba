#!/usr/bin/env python3
"""Check the relative links of the project's Markdown (`make docs-check`, run by `make test`
and CI).

For every link in README.md, docs/**/*.md and bench/results/*.md whose target is not a URL
(http, https, mailto or any other scheme): the target file or folder exists, and a
`#anchor` names a heading of the target Markdown file (or of the same file, for `#anchor`
alone), slugged as GitHub slugs it: lowercase; every character that is not a letter, a
mark, a digit, `_`, `-` or a space dropped; spaces turned into `-`; the second heading with
the same slug gets `-1`, the third `-2`, and so on. Headings and links inside fenced code
blocks and inline code spans do not count. `<a name="...">` / `id="..."` anchors count too.

Prints each broken link as `file:line: link — reason` and exits 1 if there is any.
Python 3 standard library only.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*?(?:name|id)\s*=\s*["']([^"']+)["']""", re.I)
# [text](target) and ![alt](target), with an optional "title"; the target may be <...>.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    files += sorted((ROOT / "bench" / "results").glob("*.md"))
    return [f for f in files if f.is_file()]


def strip_code_spans(line: str) -> str:
    """Blanks out inline code spans (`...`, ``...``) so nothing inside them counts."""
    out = []
    i = 0
    while i < len(line):
        if line[i] == "`":
            j = i
            while j < len(line) and line[j] == "`":
                j += 1
            ticks = line[i:j]
            end = line.find(ticks, j)
            if end == -1:
                out.append(line[i:j])
                i = j
                continue
            out.append(" " * (end + len(ticks) - i))
            i = end + len(ticks)
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def lines_outside_fences(text: str):
    """Yields (line number, line, in_fence) for every line of `text`."""
    fence = None
    for number, line in enumerate(text.split("\n"), start=1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                yield number, line, True
                continue
            yield number, line, False
        else:
            yield number, line, True
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and line.strip() == m.group(1):
                fence = None


def heading_text(raw: str) -> str:
    """What GitHub renders of a heading's Markdown: links' text, no emphasis markers."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("**", "").replace("__", "")
    text = re.sub(r"(?<![\w*])\*(?!\s)([^*]+?)(?<!\s)\*(?![\w*])", r"\1", text)
    text = re.sub(r"(?<!\w)_(?!\s)([^_]+?)(?<!\s)_(?!\w)", r"\1", text)
    return text.strip()


def slug(text: str) -> str:
    kept = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in " -" or cat[0] in "LMN" or cat == "Pc":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


_anchor_cache: dict[Path, set[str]] = {}


def anchors(path: Path) -> set[str]:
    if path in _anchor_cache:
        return _anchor_cache[path]
    text = path.read_text(encoding="utf-8")
    found: set[str] = set()
    counts: dict[str, int] = {}

    def add(heading: str) -> None:
        base = slug(heading_text(heading))
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")

    previous = ""
    previous_is_paragraph = False
    for _, line, in_fence in lines_outside_fences(text):
        if in_fence:
            previous, previous_is_paragraph = "", False
            continue
        for m in HTML_ANCHOR.finditer(line):
            found.add(m.group(1))
        atx = ATX.match(line)
        if atx:
            add(atx.group(2) or "")
            previous, previous_is_paragraph = "", False
            continue
        setext = SETEXT.match(line)
        if setext and previous_is_paragraph:
            add(previous)
            previous, previous_is_paragraph = "", False
            continue
        stripped = line.strip()
        previous = stripped
        previous_is_paragraph = bool(stripped) and not (
            stripped.startswith(("|", ">", "- ", "* ", "+ ", "<"))
            or re.match(r"^\d+[.)]\s", stripped)
            or line.startswith(("    ", "\t"))
        )
    _anchor_cache[path] = found
    return found


def check_link(source: Path, target: str) -> str | None:
    """The reason a link is broken, or None."""
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if not target or SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, anchor = target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    if path_part:
        if path_part.startswith("/"):
            dest = (ROOT / path_part.lstrip("/")).resolve()
        else:
            dest = (source.parent / path_part).resolve()
        try:
            dest.relative_to(ROOT)
        except ValueError:
            return f"{path_part} points outside the repository"
        if not dest.exists():
            return f"{path_part} does not exist"
    else:
        dest = source
    if anchor:
        if dest.is_dir():
            return f"#{anchor} points into a folder"
        if dest.suffix.lower() not in (".md", ".markdown"):
            return None  # line anchors (#L10) of source files are GitHub's, not headings
        if unquote(anchor) not in anchors(dest):
            where = "this file" if dest == source else dest.relative_to(ROOT).as_posix()
            return f"no heading #{anchor} in {where}"
    return None


def main() -> int:
    broken = 0
    checked = 0
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        for number, line, in_fence in lines_outside_fences(text):
            if in_fence:
                continue
            visible = strip_code_spans(line)
            targets = [m.group(1) for m in INLINE_LINK.finditer(visible)]
            ref = REF_DEF.match(visible)
            if ref:
                targets.append(ref.group(1))
            for target in targets:
                checked += 1
                reason = check_link(path, target)
                if reason:
                    broken += 1
                    rel = path.relative_to(ROOT).as_posix()
                    print(f"{rel}:{number}: {target} — {reason}")
    files = len(markdown_files())
    if broken:
        print(f"docs-check: {broken} broken link(s) of {checked} in {files} files", file=sys.stderr)
        return 1
    print(f"docs-check: {checked} links in {files} files, none broken")
    return 0


if __name__ == "__main__":
    sys.exit(main())
