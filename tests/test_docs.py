"""The README stays a short user's guide and the documents it points to exist: every relative link in
README.md and docs/ resolves, and docs/README.md indexes every document."""

import re

from kforge import REPO_DIR

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _relative_links(path):
    return [t for t in LINK.findall(path.read_text()) if not re.match(r"[a-z]+:", t)]


def test_readme_is_a_short_guide_that_sends_newcomers_to_the_architecture_first():
    lines = (REPO_DIR / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"
    assert "docs/architecture.md" in "\n".join(lines[:20])


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [REPO_DIR / "README.md", *sorted((REPO_DIR / "docs").glob("*.md"))]
    broken = [f"{page.relative_to(REPO_DIR)} -> {target}" for page in pages for target in _relative_links(page)
              if not (page.parent / target).exists()]
    assert not broken, broken


def test_the_docs_index_lists_every_document():
    index = REPO_DIR / "docs" / "README.md"
    listed = set(_relative_links(index))
    missing = {p.name for p in (REPO_DIR / "docs").glob("*.md")} - listed - {"README.md"}
    assert not missing, f"add {sorted(missing)} to docs/README.md"
