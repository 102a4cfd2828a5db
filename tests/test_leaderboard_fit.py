"""The leaderboard site fits a phone, a laptop and a wide screen: in headless Chromium at 390,
1400 and 1920 CSS pixels, the page never scrolls sideways (its tables do, in their own box, with
the first column kept in view), the main table's last column can be scrolled into view, a click
on a header's text sorts its table (numbers as numbers, then the other way round), every table
sorts, no heading, header or first-column label overlaps another, and each world page opens
with its table of contents.

Needs Chromium (Debian: `apt-get install chromium`); skips without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.browser import Chromium, Page, find_chromium
from helpers.leaderboard import GOLDEN, site_results, synthetic_result

from lenbench.leaderboard import build_leaderboard
from lenbench.results import result_path, write_result

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.slow,  # a real browser: about 20 s with the site's build
    pytest.mark.skipif(CHROMIUM is None,
                       reason="Chromium is not installed (Debian: apt-get install chromium), so "
                              "the site cannot be laid out in a browser here"),
]

WIDTHS = (390, 1400, 1920)
WORLD_PAGE = "world-toyworld__toy.html"
# the main ranking of each page: the index's overview, a world's table under "Main table"
MAIN = {"index.html": "document.getElementById('overview')",
        WORLD_PAGE: "document.getElementById('main-table').nextElementSibling"
                    ".querySelector('table')"}

# Labels a reader reads: none may cover another (boxes of each line, in page coordinates).
OVERLAPS = """(function () {
  var sel = 'h1, h2, h3, h4, nav a, th button, th a, tbody td:first-child, figcaption, img, '
          + 'legend, label, dt';
  var els = Array.from(document.querySelectorAll(sel)).filter(function (e) {
    return e.offsetParent !== null || getComputedStyle(e).position === 'fixed';
  });
  var boxes = [];
  els.forEach(function (e, i) {
    Array.from(e.getClientRects()).forEach(function (r) {
      if (r.width > 0 && r.height > 0) boxes.push([i, r.left + scrollX, r.top + scrollY,
                                                   r.right + scrollX, r.bottom + scrollY]);
    });
  });
  var clashes = [];
  for (var a = 0; a < boxes.length; a++) {
    for (var b = a + 1; b < boxes.length; b++) {
      var p = boxes[a], q = boxes[b];
      if (p[0] === q[0]) continue;
      var x = Math.min(p[3], q[3]) - Math.max(p[1], q[1]);
      var y = Math.min(p[4], q[4]) - Math.max(p[2], q[2]);
      if (x <= 1 || y <= 1) continue;
      var e = els[p[0]], f = els[q[0]];
      if (e.contains(f) || f.contains(e)) continue;
      clashes.push([e.tagName + ' ' + e.textContent.trim().slice(0, 40),
                    f.tagName + ' ' + f.textContent.trim().slice(0, 40)]);
      if (clashes.length > 5) return clashes;
    }
  }
  return clashes;
})()"""

# Scroll a table's last header into view (its box sideways, the page down to it): is it the
# element the reader sees at its centre, not the sticky first column or anything else?
LAST_COLUMN = """(function (table) {
  var box = table.parentElement, cells = table.tHead.rows[0].cells;
  var last = cells[cells.length - 1];
  last.scrollIntoView({block: 'center', inline: 'end'});
  var r = last.getBoundingClientRect(), b = box.getBoundingClientRect();
  var seen = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
  var first = table.tBodies[0].rows[0].cells[0].getBoundingClientRect();
  var out = {overflow: box.scrollWidth > box.clientWidth, scrolled: box.scrollLeft,
             boxWidth: b.width, inBox: r.right <= b.right + 1 && r.left >= first.right - 1,
             seen: last.contains(seen), firstLeft: first.left - b.left,
             firstSticky: getComputedStyle(table.tBodies[0].rows[0].cells[0]).position};
  box.scrollLeft = 0;
  return out;
})(%s)"""

COLUMN = """(function (table, col) {
  return Array.from(table.tBodies[0].rows).filter(function (r) { return !r.hidden; })
    .map(function (r) { var c = r.cells[col];
                        return c.hasAttribute('data-v') ? parseFloat(c.getAttribute('data-v'))
                                                        : null; });
})(%s, %d)"""


LONG = "a_dataset_name_with_no_space_to_break_it_at_all"  # headers must wrap it, not overlap


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site's test results, two more worlds whose names have no space to break at, and a
    predictor whose name has none either."""
    root = tmp_path_factory.mktemp("fit")
    site_results(root / "results")
    base = json.loads(next((GOLDEN / "toyworld" / "toy" / "mlp_probe").glob("*.json"))
                      .read_text(encoding="utf-8"))
    for i in range(2):
        other = json.loads(json.dumps(base))
        other["dataset"]["name"], other["model"]["name"] = f"{LONG}_{i}", f"org/{LONG}"
        write_result(result_path(root / "results", f"{LONG}_{i}", f"org/{LONG}", "mlp_probe",
                                 other["config_hash"]), other)
    synthetic_result(root / "results", f"{LONG}_predictor", 0)
    build_leaderboard(root / "results", root / "board")
    return root / "board"


@pytest.fixture(scope="module")
def browser() -> Chromium:
    with Chromium(CHROMIUM, width=1400, height=900) as chromium:  # type: ignore[arg-type]
        yield chromium


def _open(browser: Chromium, path: Path, width: int) -> Page:
    browser.size = (width, 900)
    page = browser.open(path.as_uri())
    page.wait_for(f"window.innerWidth === {width}")
    return page


def _click_text(page: Page, element: str) -> None:
    """A real mouse click (pressed and released) on the middle of an element's text."""
    page.evaluate(f"{element}.scrollIntoView({{block: 'center', inline: 'center'}})")
    x, y = page.evaluate(f"""(function (e) {{
      var range = document.createRange(); range.selectNodeContents(e);
      var r = range.getClientRects()[0];
      return [r.left + r.width / 2, r.top + r.height / 2];
    }})({element})""")
    for kind in ("mousePressed", "mouseReleased"):
        page.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y,
                                               "button": "left", "clickCount": 1})


def _numbers(values: list[float | None]) -> list[float]:
    filled = [v for v in values if v is not None]
    assert all(v is None for v in values[len(filled):])  # missing figures last, both ways
    return filled


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["index.html", WORLD_PAGE])
def test_page_fits_and_its_main_table_scrolls_and_sorts(board, browser, name, width) -> None:
    page = _open(browser, board / name, width)
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # no page sideways
    assert page.evaluate(OVERLAPS) == []

    table = MAIN[name]
    seen = page.evaluate(LAST_COLUMN % table)
    assert seen["boxWidth"] >= width - 60  # the table's box takes the page's width
    assert seen["inBox"] and seen["seen"], seen  # the last column, in view and not covered
    assert seen["firstSticky"] == "sticky" and abs(seen["firstLeft"]) <= 2, seen
    if width == 390:
        assert seen["overflow"] and seen["scrolled"] > 0  # a phone scrolls the box, not the page
    for i in range(page.evaluate("document.querySelectorAll('.scroll table').length")):
        other = page.evaluate(LAST_COLUMN % f"document.querySelectorAll('.scroll table')[{i}]")
        assert other["inBox"] and other["seen"], (i, other)  # every table's, beside the first

    # the static MAE column (a world column on the index): a click on its header's text
    col = page.evaluate(f"Array.from({table}.tHead.rows[0].cells).findIndex(function (th) {{"
                        " var t = th.textContent; return t.indexOf('Static MAE') === 0"
                        " || t.indexOf('toyworld / toy') === 0; })")
    assert col > 0
    button = f"{table}.tHead.rows[0].cells[{col}].querySelector('button')"
    _click_text(page, button)
    ascending = _numbers(page.evaluate(COLUMN % (table, col)))
    assert len(ascending) >= 5 and ascending == sorted(ascending)
    assert page.evaluate(f"{button}.parentElement.getAttribute('aria-sort')") == "ascending"
    _click_text(page, button)
    descending = _numbers(page.evaluate(COLUMN % (table, col)))
    assert descending == sorted(ascending, reverse=True)
    assert page.evaluate("location.pathname").endswith(name)  # the click did not navigate

    if width == 390:  # a phone reads the ranking: legible text, names beside their figures
        size = page.evaluate(f"parseFloat(getComputedStyle({table}.tBodies[0].rows[0].cells[1])"
                             ".fontSize)")
        first = page.evaluate(f"{table}.tBodies[0].rows[0].cells[0].getBoundingClientRect()"
                              ".width")
        assert size >= 12 and first <= 0.45 * width
    if name == "index.html":  # the verdict opens the page; its contents lead to the ranking
        verdict = page.evaluate("""(function () {
          scrollTo(0, 0);
          var h = Array.from(document.querySelectorAll('h2')).find(function (e) {
            return e.textContent.indexOf('Verdict') === 0; });
          return h ? h.getBoundingClientRect().top : null; })()""")
        assert verdict is None or verdict < 900  # (none where no world has prompts to rank)
        assert page.evaluate("document.querySelector('nav.toc a[href=\"#ranking\"]') !== null")


@pytest.mark.parametrize("name", ["index.html", WORLD_PAGE])
def test_every_table_sorts_both_ways(board, browser, name) -> None:
    page = _open(browser, board / name, 1400)
    results = page.evaluate("""Array.from(document.querySelectorAll('table')).map(function (t) {
      var cells = t.tHead.rows[0].cells, col = cells.length - 1, th = cells[col];
      function values() {
        return Array.from(t.tBodies[0].rows).map(function (r) {
          var c = r.cells[col]; return c && c.hasAttribute('data-v')
            ? parseFloat(c.getAttribute('data-v')) : null; });
      }
      th.click(); var up = [values(), th.getAttribute('aria-sort')];
      th.click(); var down = [values(), th.getAttribute('aria-sort')];
      return [t.classList.contains('sortable'), up, down];
    })""")
    assert results
    for sortable, (up, up_sort), (down, down_sort) in results:
        assert sortable and (up_sort, down_sort) == ("ascending", "descending")
        if all(v is not None for v in up):  # a numeric column: by value, each way
            assert up == sorted(up) and down == sorted(up, reverse=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_world_page_opens_with_its_contents(board, browser, width) -> None:
    page = _open(browser, board / WORLD_PAGE, width)
    toc = page.evaluate("""(function () {
      var nav = document.querySelector('main nav.toc');
      var links = Array.from(nav.querySelectorAll('a')).map(function (a) {
        return a.getAttribute('href').slice(1); });
      var sections = Array.from(document.querySelectorAll('main h2[id], main h3[id]'))
        .map(function (h) { return h.id; });
      return {links: links, sections: sections,
              first: document.querySelector('main h1').nextElementSibling === nav,
              top: nav.getBoundingClientRect().top};
    })()""")
    assert toc["first"] and toc["top"] < 400  # right under the title, on the first screen
    assert set(toc["sections"]) <= set(toc["links"])  # every section and subsection
    assert page.evaluate(OVERLAPS) == []
