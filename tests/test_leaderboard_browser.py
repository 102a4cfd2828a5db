"""The leaderboard site in a real browser: headless Chromium opens the pages from file://,
finds every world and predictor, sorts by a header click, filters, loads the plots, requests
nothing but local files, and paints a page that is not blank.

Needs Chromium (Debian: `apt-get install chromium`; .ci/run installs it); skips without it.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from helpers.browser import Chromium, find_chromium
from helpers.leaderboard import site_results

from lenbench.leaderboard import build_leaderboard

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.slow,  # a real browser: about 10 s with the site's build
    pytest.mark.skipif(CHROMIUM is None,
                       reason="Chromium is not installed (Debian: apt-get install chromium), so "
                              "the site cannot be opened in a browser here"),
]

COLUMN = """(function (col) {
  var rows = Array.from(document.querySelectorAll('#overview tbody tr'))
    .filter(function (r) { return !r.hidden; });
  return rows.map(function (r) {
    var c = r.cells[col];
    return [r.cells[0].textContent, c.getAttribute('data-v'), c.textContent];
  });
})(%d)"""


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("browser")
    expected = site_results(root / "results")
    build_leaderboard(root / "results", root / "board")
    return root / "board", expected


@pytest.fixture(scope="module")
def browser() -> Chromium:
    with Chromium(CHROMIUM, width=1280, height=900) as chromium:  # type: ignore[arg-type]
        yield chromium


def _world_column(page, title: str) -> int:
    return page.evaluate(
        "Array.from(document.querySelectorAll('#overview thead th'))"
        f".findIndex(function (th) {{ return th.textContent.indexOf({title!r}) === 0; }})")


def test_index_lists_sorts_and_filters(board, browser: Chromium) -> None:
    folder, expected = board
    page = browser.open((folder / "index.html").as_uri())
    headers = page.evaluate("Array.from(document.querySelectorAll('#overview thead th'))"
                            ".map(function (th) { return th.textContent; })")
    for title in expected["worlds"]:
        assert any(h.startswith(title) for h in headers), (title, headers)
    names = page.evaluate("Array.from(document.querySelectorAll('#overview tbody tr'))"
                          ".map(function (r) { return r.cells[0].textContent; })")
    for name in expected["predictors"]:
        assert any(n.startswith(name) for n in names), (name, names)
    assert page.evaluate("document.querySelectorAll('script').length") == 1  # names stay text

    col = _world_column(page, "toyworld / toy")
    button = f"document.querySelectorAll('#overview thead th')[{col}].querySelector('button')"
    page.evaluate(f"{button}.click()")
    cells = page.evaluate(COLUMN % col)
    values = [float(v) for _, v, _ in cells if v is not None]
    assert values == sorted(values) and len(values) >= 5
    assert all(v is None for _, v, _ in cells[len(values):])  # no figure: last
    page.evaluate(f"{button}.click()")
    cells = page.evaluate(COLUMN % col)
    values = [float(v) for _, v, _ in cells if v is not None]
    assert values == sorted(values, reverse=True)
    assert all(v is None for _, v, _ in cells[len(values):])  # last in both directions
    assert page.evaluate(f"{button}.parentElement.getAttribute('aria-sort')") == "descending"

    # hide the toyworld column: rows with no figure elsewhere go, mlp_probe stays
    world = page.evaluate(f"document.querySelectorAll('#overview thead th')[{col}]"
                          ".getAttribute('data-world')")
    page.evaluate(f"document.querySelector('#filters input[data-world=\"{world}\"]').click()")
    shown = page.evaluate("Array.from(document.querySelectorAll('#overview tbody tr'))"
                          ".filter(function (r) { return !r.hidden; })"
                          ".map(function (r) { return r.cells[0].textContent; })")
    assert shown == ["mlp_probe"]
    assert page.evaluate(f"document.querySelectorAll('#overview thead th')[{col}].hidden")
    page.evaluate(f"document.querySelector('#filters input[data-world=\"{world}\"]').click()")
    page.evaluate("document.querySelector('#filters input[data-kind=\"reference\"]').click()")
    shown = page.evaluate("Array.from(document.querySelectorAll('#overview tbody tr'))"
                          ".filter(function (r) { return !r.hidden; }).length")
    assert shown == len(names) - 1  # the noise floor, the only reference, is hidden

    assert all(url.startswith(("file://", "data:")) for url in page.requested_urls())
    image = _pixels(page.screenshot())
    assert image.size == (1280, 900)
    from PIL import ImageStat

    assert max(ImageStat.Stat(image).stddev) > 20  # text, tables and colour: not blank


def test_world_page_sorts_and_shows_its_plots(board, browser: Chromium) -> None:
    folder, _ = board
    page = browser.open((folder / "world-toyworld__toy.html").as_uri())
    page.wait_for("Array.from(document.images).every(function (i) { return i.complete; })")
    sizes = page.evaluate("Array.from(document.images).map(function (i) {"
                          " return i.naturalWidth; })")
    assert len(sizes) >= 2 and all(w > 0 for w in sizes)  # the PNGs load under the page's CSP
    table = "document.querySelector('table.sortable')"
    mae_col = page.evaluate(f"Array.from({table}.tHead.rows[0].cells).findIndex("
                            "function (th) { return th.textContent.indexOf('Static MAE') === 0; })")
    page.evaluate(f"{table}.tHead.rows[0].cells[{mae_col}].querySelector('button').click()")
    shown = page.evaluate(f"Array.from({table}.tBodies[0].rows).map(function (r) {{"
                          f" return parseFloat(r.cells[{mae_col}].textContent); }})")
    assert shown == sorted(shown) and len(shown) >= 5
    assert page.evaluate("document.getElementById('glossary') !== null")
    assert all(url.startswith(("file://", "data:")) for url in page.requested_urls())
    page.resize(390, 844)  # a phone: wide tables scroll in their box, the page does not
    page.wait_for("window.innerWidth === 390")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def _pixels(png: bytes):
    from PIL import Image

    return Image.open(io.BytesIO(png)).convert("RGB")
