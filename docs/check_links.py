"""Check the links of the built HTML site: every internal href and every src (images, scripts, styles)
must name a file of the build, and every #fragment an id in that file. External links (http, https,
mailto, data) are not followed: the build is offline. Exits 1 and lists the broken links, if any.

Usage: python docs/check_links.py docs/_build/html
"""
from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

EXTERNAL = ("http", "https", "mailto", "data", "javascript", "tel", "ftp")


class _Page(HTMLParser):
    """The ids a page defines and the (attribute, url) pairs it links to."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) is not None and not (tag == "link" and key == "href" and "preconnect" in (a.get("rel") or "")):
                self.links.append((key, a[key]))


def check(root: Path) -> tuple[int, list[str]]:
    """(links checked, broken links as 'page: url (why)')."""
    # the pages of the site; _static holds the theme's template fragments (unrendered Jinja), not pages
    pages = {p.resolve(): p for p in root.rglob("*.html") if "_static" not in p.relative_to(root).parts}
    parsed: dict[Path, _Page] = {}

    def page(path: Path) -> _Page:
        if path not in parsed:
            parser = _Page()
            parser.feed(path.read_text(encoding="utf-8", errors="replace"))
            parsed[path] = parser
        return parsed[path]

    checked, broken = 0, []
    for path in sorted(pages):
        for attr, url in page(path).links:
            parts = urlsplit(url)
            if parts.scheme in EXTERNAL or url.startswith("//"):
                continue
            checked += 1
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(root.resolve())}: {url}"
            if not target.exists():
                broken.append(f"{where} (no file {target})")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in page(target).ids:
                broken.append(f"{where} (no id {parts.fragment!r} in {target.name})")
    return checked, broken


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "docs/_build/html")
    if not (root / "index.html").exists():
        print(f"check_links: no built site at {root} (run make docs)", file=sys.stderr)
        return 2
    checked, broken = check(root)
    for b in broken:
        print(f"broken: {b}")
    print(f"check_links: {checked} internal links and images checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
