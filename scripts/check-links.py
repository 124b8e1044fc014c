#!/usr/bin/env python3
"""Checks the relative links of the repository's Markdown (issue 40 §4).

Every `[text](target)` in README.md, ARCHITECTURE.md, BENCHMARKS.md, benchmarks/ and the
book (docs/src/**/*.md) whose target is not a URL must name a file or folder
that exists, relative to the page; a `#fragment` on a Markdown target must
name one of its headings, and every page of the book must be in its
SUMMARY.md (GitHub's and mdBook's anchors: lower-cased, spaces
to hyphens, punctuation dropped). Links in code blocks and code spans do not
count. Offline: web links are not fetched. Exits 1 naming each broken link.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
pages = [root / p for p in ("README.md", "ARCHITECTURE.md", "BENCHMARKS.md")]
pages += sorted((root / "benchmarks").rglob("*.md"))
pages += sorted((root / "docs" / "src").rglob("*.md"))

link = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
image = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def prose(text):
    """The text without fenced code blocks and code spans."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def headings_of(path):
    # Headings may hold code spans: anchors are taken from the raw lines.
    found = set()
    fence = False
    for line in path.read_text().split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        m = None if fence else re.match(r"^#{1,6} (.+)$", line)
        if m:
            title = m.group(1).strip().lower()
            title = re.sub(r"[^\w\- ]", "", title)
            found.add(title.replace(" ", "-"))
    return found


broken = []
for page in pages:
    if not page.exists():
        continue
    text = prose(page.read_text())
    for target in link.findall(text) + image.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path_part, _, fragment = target.partition("#")
        dest = page if not path_part else (page.parent / path_part)
        if not dest.exists():
            broken.append(f"{page.relative_to(root)}: {target}: no such file")
            continue
        if fragment and dest.suffix == ".md" and fragment not in headings_of(dest):
            broken.append(f"{page.relative_to(root)}: {target}: no heading #{fragment}")

# Every page of the book is in its table of contents.
summary = root / "docs" / "src" / "SUMMARY.md"
if summary.exists():
    listed = set(link.findall(prose(summary.read_text())))
    for page in sorted((root / "docs" / "src").rglob("*.md")):
        rel = page.relative_to(summary.parent).as_posix()
        if rel != "SUMMARY.md" and rel not in listed:
            broken.append(f"docs/src/{rel}: not in docs/src/SUMMARY.md")

for b in broken:
    print(f"check-links: {b}", file=sys.stderr)
print(f"check-links: {len(pages)} pages, {'ok' if not broken else f'{len(broken)} broken'}")
sys.exit(1 if broken else 0)
