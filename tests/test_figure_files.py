"""Figures rendered in forks while the leaderboard's tables are built
(lenbench/runtime/figure_files.py)."""

from __future__ import annotations

import pytest

from lenbench.runtime.figure_files import rendering_aside, write_png
from lenbench.runtime.fork_pool import can_fork

pytestmark = pytest.mark.skipif(not can_fork(), reason="needs fork()")


def _figure():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2))
    fig.subplots().plot([0, 1, 2], [2, 0, 1])
    return fig


def test_a_figure_rendered_aside_is_the_figure_rendered_now(tmp_path) -> None:
    write_png(_figure(), tmp_path / "now.png", dpi=50, metadata={"Software": None})
    with rendering_aside():
        for i in range(3):  # more renders than cores wait for a free one
            write_png(_figure(), tmp_path / f"aside{i}.png", dpi=50,
                      metadata={"Software": None})
    now = (tmp_path / "now.png").read_bytes()
    assert now.startswith(b"\x89PNG")
    assert all((tmp_path / f"aside{i}.png").read_bytes() == now for i in range(3))


def test_a_render_that_fails_names_its_file(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="broken.png"), rendering_aside():
        write_png(_figure(), tmp_path / "broken.png", dpi="not a number")
    assert not (tmp_path / "broken.png").exists()
