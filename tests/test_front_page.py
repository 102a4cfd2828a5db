"""The front page of the committed leaderboard fits: README.md, built from leaderboard/results,
is short, opens with the verdict and its plot, keeps every table's caption in the glossary and
each world's details on the world's own page.

Tables are data, not prose: a table row may be as wide as its columns make it, so the line
limit applies to every other line (paragraphs, list items, headings, links).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lenbench.leaderboard import build_leaderboard
from lenbench.leaderboard.pages import GLOSSARY, anchor

REPO = Path(__file__).resolve().parent.parent
MAX_LINES, OPENING, MAX_PROSE = 600, 80, 1500
LINK = re.compile(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)")


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("board")
    return build_leaderboard(REPO / "leaderboard" / "results", out, site=False).parent


def _sections(readme: str) -> dict[str, str]:
    """The README's `##` sections by heading."""
    return {part.split("\n", 1)[0]: part for part in readme.split("\n## ")[1:]}


def test_the_readme_is_short_and_opens_with_the_verdict_and_its_plot(board: Path) -> None:
    lines = (board / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, len(lines)
    opening = lines[:OPENING]
    assert "## Verdict: which predictor when" in opening
    assert any(ln.startswith("| Predictor | Tier |") for ln in opening)
    assert any(ln.startswith("![Cost against accuracy") for ln in opening)
    prose = [ln for ln in lines if not ln.startswith("|")]
    assert max(map(len, prose)) <= MAX_PROSE


def test_each_world_is_named_has_its_main_table_and_links_its_page(board: Path) -> None:
    readme = (board / "README.md").read_text(encoding="utf-8")
    worlds = {h: s for h, s in _sections(readme).items()
              if h not in ("Verdict: which predictor when", "Failed runs")}
    assert len(worlds) >= 5
    for heading, section in worlds.items():
        assert "/" in heading and "plot-" not in heading  # "data set / model", not a file stem
        assert "| Predictor | Static MAE |" in section, heading
        table = [ln.strip("|").split(" | ") for ln in section.splitlines() if ln.startswith("| ")]
        deltas = [j for j, h in enumerate(table[0]) if h.strip().startswith("Δ vs")]
        assert deltas, heading
        for cells in table[2:]:  # a decoding variant, as "name (reading)", only with its Δ
            if "(" in cells[0] and "(ref)" not in cells[0]:
                assert any(cells[j].strip() != "—" for j in deltas), (heading, cells[0])
        pages = [m.group(1) for m in LINK.finditer(section) if m.group(1).startswith("world-")]
        assert len(pages) == 1, heading
        page = (board / pages[0]).read_text(encoding="utf-8")
        assert f"\n## {heading}\n" in page  # the page is that world's
        assert "](README.md)" in page  # and leads back
        # the details live on the page, not on the front page
        assert "### Predictor details" in page and "### Predictor details" not in section


def test_every_main_table_links_its_caption_once_written_in_the_glossary(board: Path) -> None:
    glossary = (board / GLOSSARY).read_text(encoding="utf-8")
    anchors = {anchor(h[3:]) for h in glossary.splitlines() if h.startswith("## ")}
    pages = [board / "README.md", *sorted(board.glob("world-*.md"))]
    for path in pages:
        text = path.read_text(encoding="utf-8")
        blocks = text.split("\n\n")
        mains = [i for i, b in enumerate(blocks) if b.startswith("| Predictor | Static MAE |")]
        assert mains, path.name
        for i in mains:
            after = blocks[i + 1:i + 4]  # the note on the Δ family comes first
            links = [m for b in after for m in LINK.finditer(b) if m.group(1) == GLOSSARY]
            assert links and links[0].group(2) == anchor("Main table"), path.name
        # every caption link of the page lands on a heading of the glossary
        targets = [m.group(2) for m in LINK.finditer(text)
                   if m.group(1) == GLOSSARY and m.group(2)]  # not the page's way to it
        assert targets and set(targets) <= anchors, (path.name, set(targets) - anchors)
    # the long captions are written in the glossary only
    main = next(p for p in glossary.split("\n## ") if p.startswith("Main table\n"))
    caption = max(main.split("\n\n")[1:], key=len)
    assert len(caption) > MAX_PROSE
    for path in pages:
        assert caption not in path.read_text(encoding="utf-8"), path.name
