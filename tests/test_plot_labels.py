"""The cost-against-accuracy plot labels each point where its text overlaps no other label, no
point and not the legend: crowded points that one fixed offset would print on top of each other
come out readable."""

from __future__ import annotations

import itertools

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lenbench.leaderboard.verdict import place_labels

# eight predictors as a world's verdict places them: several within a few tokens and a few
# microseconds of each other, long names among them
CROWDED = [(0.02, 220.1, "constant"), (0.021, 218.9, "prompt_length"),
           (0.9, 206.6, "tfidf_ridge"), (1.0, 206.5, "mlp_probe"),
           (1.1, 205.9, "outlets_no_decoder"), (1.05, 204.8, "lp_only"),
           (3.0, 201.6, "bert_regressor"), (1.0, 186.3, "bin_classifier (median)")]


def _axes():
    fig = Figure(figsize=(7.2, 4.2), layout="constrained")
    ax = fig.subplots()
    ax.scatter([x for x, _, _ in CROWDED], [y for _, y, _ in CROWDED])
    ax.plot([0.02, 1.0], [220.1, 186.3], label="no other row is both cheaper and more accurate")
    ax.set_xscale("log")
    ax.legend(fontsize="x-small", loc="best")
    return fig, ax


def _label_boxes(fig, ax):
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()
    return [t.get_window_extent(renderer) for t in ax.texts], renderer


def test_crowded_labels_overlap_no_other_label_point_or_legend():
    fig, ax = _axes()
    place_labels(fig, ax, CROWDED)
    boxes, renderer = _label_boxes(fig, ax)
    assert len(boxes) == len(CROWDED)
    assert not [(a, b) for a, b in itertools.combinations(range(len(boxes)), 2)
                if boxes[a].overlaps(boxes[b])]
    legend = ax.get_legend().get_window_extent(renderer)
    assert not any(box.overlaps(legend) for box in boxes)
    dots = [ax.transData.transform((x, y)) for x, y, _ in CROWDED]
    assert not any(box.contains(px, py) for box in boxes for px, py in dots)


def test_one_fixed_offset_would_print_them_on_top_of_each_other():
    """The case is a real test of the placement: labels at one offset do collide here."""
    fig, ax = _axes()
    for x, y, label in CROWDED:
        ax.annotate(label, (x, y), xytext=(6, 3), textcoords="offset points", fontsize=7)
    boxes, _ = _label_boxes(fig, ax)
    assert any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
