"""The page's own files keep to what the Content-Security-Policy and the escaping rule say:
no markup parsed from data, nothing inline, nothing from elsewhere."""

from __future__ import annotations

import re
from importlib import resources

STATIC = resources.files("kinetic.dashboard") / "static"


def test_the_script_never_parses_markup_or_code_from_strings():
    script = (STATIC / "app.js").read_text()
    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        'setTimeout("',
        "DOMParser",
        "createContextualFragment",
    ):
        assert sink not in script, sink


def test_the_page_has_no_inline_script_style_or_handler_and_loads_nothing_from_elsewhere():
    page = (STATIC / "index.html").read_text()
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    assert "<style" not in page and " style=" not in page
    assert re.findall(r"\son[a-z]+=", page) == []
    assert re.findall(r"(?:src|href)=\"(?!/)", page) == []
    for name in ("app.js", "app.css"):
        text = (STATIC / name).read_text().replace('"http://www.w3.org/2000/svg"', "")
        assert re.findall(r"https?://|url\(", text) == [], name  # the SVG namespace is a name


def test_every_file_the_page_names_ships_in_the_package():
    page = (STATIC / "index.html").read_text()
    for path in re.findall(r"(?:src|href)=\"/static/([^\"]+)\"", page):
        assert (STATIC / path).is_file(), path
