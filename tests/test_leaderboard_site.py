"""The web site lenbench-leaderboard writes beside README.md, read as files (no browser):
every world and predictor present, nothing loaded from another host, names escaped, links to
the result files that resolve, and cells that sort by the number they show."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
from helpers.leaderboard import HOSTILE_SHOWN, site_results, synthetic_result

from lenbench.leaderboard import build_leaderboard, main
from lenbench.leaderboard.blocks import Caption, Table, markdown_lines
from lenbench.leaderboard.html import blocks_html, inline, sort_value


class _Page(HTMLParser):
    """Attributes of every tag, the text, and the text of each table cell by row."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.attrs: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(tag, name, value or "") for name, value in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("site")
    expected = site_results(root / "results")
    build_leaderboard(root / "results", root / "board")
    return root / "board", expected


def test_every_world_and_predictor_present(site: tuple[Path, dict[str, list[str]]]) -> None:
    board, expected = site
    index = _parse(board / "index.html")
    text = "".join(index.text)
    for title in expected["worlds"]:
        assert title in text
    for name in expected["predictors"]:
        assert name in text, name
    pages = sorted(p.name for p in board.glob("world-*.html"))
    assert pages == ["world-other_set__org_model-b.html", "world-toyworld__toy.html"]
    links = {value for tag, name, value in index.attrs if tag == "a" and name == "href"}
    assert set(pages) <= links  # the index links every world's page
    world = "".join(_parse(board / "world-toyworld__toy.html").text)
    for name in ("mlp_probe", "bin_classifier (expectation)", "spaced_probe", HOSTILE_SHOWN):
        assert name in world
    assert "Failed runs" in text and "train split is empty" in text  # the failed run, listed
    assert "000000000000.json" in text  # and the invalid file


def test_no_url_of_another_host(site: tuple[Path, dict[str, list[str]]]) -> None:
    board, _ = site
    for path in [board / "index.html", *board.glob("world-*.html")]:
        page = _parse(path)
        for tag, name, value in page.attrs:
            if name in ("src", "href", "action", "srcset", "data", "poster"):
                assert not re.match(r"\s*([a-z][a-z0-9+.-]*:|//|\\\\)", value, re.I) \
                    or value.startswith("#"), (path.name, tag, value)
        assert not {"link", "iframe", "object", "embed", "base", "form"} & set(page.tags)
        source = path.read_text(encoding="utf-8")
        style_and_script = "".join(re.findall(r"<(?:style|script)>(.*?)</(?:style|script)>",
                                              source, re.S))
        assert not re.search(r"https?:|//[a-z]|@import|url\(", style_and_script, re.I)
        assert "Content-Security-Policy" in source and "default-src 'none'" in source


def test_hostile_name_is_escaped(site: tuple[Path, dict[str, list[str]]]) -> None:
    board, _ = site
    for path in [board / "index.html", board / "world-toyworld__toy.html"]:
        source = path.read_text(encoding="utf-8")
        assert source.count("<script") == 1  # the page's own script only
        assert "<img src=//evil" not in source
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in source
        page = _parse(path)
        assert not any(value.startswith("//evil") for _, _, value in page.attrs)


def test_result_links_are_relative_and_exist(site: tuple[Path, dict[str, list[str]]]) -> None:
    board, _ = site
    results = (board.parent / "results").resolve()
    linked = set()
    for path in board.glob("world-*.html"):
        for tag, name, value in _parse(path).attrs:
            if tag == "a" and name == "href" and value.endswith(".json"):
                assert not value.startswith("/")
                target = (path.parent / unquote(value)).resolve()
                assert target.is_file(), value
                linked.add(target.relative_to(results).as_posix())
            if tag == "img" and name == "src":
                assert (path.parent / unquote(value)).is_file(), value
    assert "toyworld/toy/odd folder #1/a b.json" in linked  # quoted, and still found
    ok_files = {p.relative_to(results).as_posix() for p in results.rglob("*.json")}
    ok_files -= {"toyworld/toy/broken/000000000000.json",
                 "toyworld/toy/constant/a1b7ae65841b.json"}  # invalid, failed: no world page
    assert linked == ok_files


def test_index_cells_carry_rank_mae_and_markers(site: tuple[Path, dict[str, list[str]]]
                                                ) -> None:
    board, _ = site
    source = (board / "index.html").read_text(encoding="utf-8")
    # toyworld has 4 test prompts, too few to rank: ranks in parentheses. mlp_probe (82.0)
    # comes after the two 80.0 rows there, as in the world's main table.
    assert re.search(r'data-v="82"[^>]*>\(3\) · 82\.0 ± 2\.8</td>', source)
    assert "(few prompts)" in source
    assert 'data-kinds="dynamic static"' in source  # mlp_probe is both
    assert 'data-kinds="reference"' in source


def test_index_markers_are_the_markdowns(tmp_path: Path) -> None:
    """† (reads the next token), (non-causal) and ‡ (earlier protocol) come from the same
    function as the markdown's, so both show them on the same rows."""
    res = tmp_path / "results"
    synthetic_result(res, "marked", 0, protocol_version=1)
    synthetic_result(res, "plain", 0)
    path = next((res / "toyworld" / "toy" / "marked").glob("*.json"))
    data = json.loads(path.read_text(encoding="utf-8"))
    data["predictor"]["reads_next_token"] = True
    data["causality"] = {"passed": False, "checked_rows": 8}
    path.write_text(json.dumps(data), encoding="utf-8")
    readme = build_leaderboard(res, tmp_path / "board")
    assert "| marked † (non-causal) ‡ |" in readme.read_text(encoding="utf-8")
    index = (tmp_path / "board" / "index.html").read_text(encoding="utf-8")
    assert re.search(r">\(\d\) · 80\.0 † \(non-causal\) ‡</td>", index)
    plain = re.search(r">plain</td>.*?</tr>", index)
    assert plain and "‡" not in plain.group() and "†" not in plain.group()


def test_no_site_flag_and_stale_pages(tmp_path: Path, site: tuple[Path, dict[str, list[str]]]
                                      ) -> None:
    board, _ = site
    out = tmp_path / "board"
    assert main(["--results", str(board.parent / "results"), "--out", str(out),
                 "--no-site"]) == 0
    assert not list(out.glob("*.html"))
    stale = out / "world-gone.html"
    stale.write_text("old", encoding="utf-8")
    keep = out / "notes.html"
    keep.write_text("mine", encoding="utf-8")
    assert main(["--results", str(board.parent / "results"), "--out", str(out)]) == 0
    assert not stale.exists() and keep.read_text(encoding="utf-8") == "mine"
    assert (out / "README.md").read_bytes() == (board / "README.md").read_bytes()


@pytest.mark.parametrize(("cell", "value"), [
    ("82.0 ± 2.8", 82.0), ("[72.0, 92.0]", 82.0), ("**+19.1** [+10.9, +27.5]", 19.1),
    ("-0.7 [-1.9, +0.5]", -0.7), ("62% [55, 70]", 62.0), ("≥ 40.3 [37.6, 43.2]", 40.3),
    ("49.6 – 99.2", 49.6), ("1032 (467)", 1032.0), ("12.3k", 12300.0), ("2.1M", 2.1e6),
    ("1,234.50 s", 1234.5), ("0.00098", 0.00098), ("(reference)", 0.0), ("—", None),
    ("— (oracle gains 1%)", None), ("", None), ("mlp_probe", None), ("3gram", None),
    ("*noise_floor* (ref)", None), ("1e-05", 1e-05),
])
def test_sort_value(cell: str, value: float | None) -> None:
    assert sort_value(cell) == pytest.approx(value) if value is not None \
        else sort_value(cell) is None


def test_inline_marks_after_escaping() -> None:
    assert inline("**+1.0** *ref* `a\\|b` x\\|y <b>") == (
        "<strong>+1.0</strong> <em>ref</em> <code>a|b</code> x|y &lt;b&gt;")
    assert inline("2 * 3 * 4") == "2 * 3 * 4"  # a lone star is not emphasis


def test_one_table_two_renderings() -> None:
    """A column added to a table shows in the markdown and on the page alike; its caption is
    under the table in the markdown and reached from the header on the page."""
    table = Table(["Predictor", "New figure"], [["a", "1.5"]], foot=[["*all*", "3"]],
                  caption="main")
    caption = Caption("main", "What the columns mean.")
    assert markdown_lines([table, caption]) == [
        "| Predictor | New figure |\n|:---|---:|\n| a | 1.5 |\n| *all* | 3 |", "",
        "What the columns mean.", ""]
    page = blocks_html([table, caption], {id(table): "g-main"})
    assert "New figure" in page and 'data-v="1.5"' in page and 'href="#g-main"' in page
    assert "<tfoot><tr><td class=\"l\"><em>all</em></td>" in page
    assert "What the columns mean." not in page  # the glossary holds it, once per page
