"""The docs site builds with warnings as errors, and no internal link in it (nor in README.md
into it) is broken."""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from paths import ROOT

DOCS = ROOT / "docs"


class _Links(HTMLParser):
    """Every href and src of a page, and every id it defines."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        for key in ("href", "src"):
            if found.get(key):
                self.links.append(str(found[key]))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "html"
    built = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                            str(out)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, f"the docs do not build cleanly:\n{built.stderr}"
    return out


def _parsed(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(errors="replace"))
    return parser


def test_no_internal_link_of_the_site_is_broken(site: Path) -> None:
    pages = {page: _parsed(page) for page in site.rglob("*.html") if "_static" not in page.parts}
    broken = []
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("//", "mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link}")
            elif parts.fragment and target in pages and parts.fragment not in pages[target].ids:
                broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "broken internal links:\n" + "\n".join(broken)
    for section in ("users", "operators", "developers", "contributors"):
        assert (site / section / "index.html").exists(), section
    reference = (site / "operators" / "config-reference.html").read_text()
    assert "GPUCheckpointApp.idle_timeout" in reference and "SlurmCommands.submit" in reference


def test_the_readme_links_only_to_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    links = [m.group(1) for m in re.finditer(r"\]\(([^)\s]+)\)", readme)]
    local = [link.split("#")[0] for link in links if not urlsplit(link).scheme and not link.startswith("#")]
    assert local, "README.md links into the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
