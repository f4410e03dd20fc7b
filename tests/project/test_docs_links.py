"""The README stays a front page (at most 300 lines), and every link between the README and docs/ reaches a file
and, when it names one, a heading there (as GitHub makes a heading's anchor), so that depth moved out of the
README is still found."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    found = set()
    for line in page.read_text().splitlines():
        if heading := re.match(r"#{1,6} (.+)", line):
            text = re.sub(r"[^\w\- ]", "", heading.group(1).lower())
            found.add(text.replace(" ", "-"))
    return found


def test_the_readme_is_at_most_300_lines():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= 300, f"the README has {lines} lines: move depth to docs/"


def test_every_link_between_the_readme_and_the_docs_reaches_its_page_and_heading():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
