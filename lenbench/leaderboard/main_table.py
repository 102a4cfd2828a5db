"""The main table of a world: a column per metric spec, each beside its paired difference to
the reference predictor, the share of the constant-to-floor gap closed, where the MAE gain comes
from, and how many differences the Δ columns test (the bold is not corrected for multiplicity)."""

from __future__ import annotations

from lenbench.leaderboard import metric_specs
from lenbench.leaderboard.blocks import LEFT, RIGHT, Block, Table, Text
from lenbench.leaderboard.cells import DASH
from lenbench.leaderboard.greedy_beside_sampled import section_floor
from lenbench.leaderboard.rows import Row, gap_share_cell, metric_cell, name_cell
from lenbench.scoring.comparisons import (
    FALLBACK_REFERENCE,
    choose_reference,
    gain_split,
    paired_cell,
)

__all__ = ["GAIN_SPLIT", "family_note", "front_table", "main_table"]


def _delta_cell(row: Row, ref: Row, kind: str) -> str:
    """A row's paired difference to the reference predictor (`kind`: static or dynamic)."""
    if row is ref:
        return "(reference)"
    if row.kind != "predictor" or (kind == "dynamic" and (
            row.variant is not None or not row.values("dynamic.mae"))):
        return DASH
    return paired_cell(row.scored_rows(), ref.scored_rows(), kind)


GAIN_SPLIT = "Gain: ended / capped"


def _gain_cell(row: Row, const: Row) -> str:
    """The row's MAE gain over the constant from the rows that ended and from the censored
    ones (a dash for references, the constant, and a world without censored rows)."""
    if row.kind != "predictor" or row is const:
        return DASH
    split = gain_split(row.scored_rows(), const.scored_rows())
    if split is None or not any((p.censored or [False]).count(True) for p in
                                row.scored_rows() if p is not None):
        return DASH
    return f"{split[0]:+.1f} / {split[1]:+.1f}"


def main_table(rows: list[Row], reference: str) -> tuple[Table, str | None]:
    """The main table: the name, a column per metric spec (metric_specs.MAIN_METRICS), each
    followed where its spec says so by the paired difference to the reference predictor (static,
    and dynamic when the reference is dynamic), and the seeds; returns the table and the
    reference used (None: no Δ column)."""
    mains = {r.name: r for r in rows if r.variant is None and r.kind == "predictor"}
    ref_name = choose_reference(sorted(mains), reference)
    ref = mains.get(ref_name) if ref_name else None
    paired: set[str] = set()  # the kinds of paired difference shown
    if ref is not None:
        paired = {"static", "dynamic"} if ref.values("dynamic.mae") else {"static"}
    header, align, body = ["Predictor"], [LEFT], [[name_cell(row)] for row in rows]
    for spec in metric_specs.MAIN_METRICS:
        header.append(spec.label)
        align.append(RIGHT)
        for row, cells in zip(rows, body):
            cells.append(metric_cell(row, spec))
        if ref is not None and spec.delta in paired:
            header.append(f"{'Δ' if spec.delta == 'static' else 'Dyn. Δ'} vs {ref_name}")
            align.append(RIGHT)
            for row, cells in zip(rows, body):
                cells.append(_delta_cell(row, ref, spec.delta))
    floor = section_floor(rows)
    const = mains.get(FALLBACK_REFERENCE)
    if floor is not None and const is not None:
        header.append("Share of gap")
        align.append(RIGHT)
        for row, cells in zip(rows, body):
            cells.append(gap_share_cell(row, const, floor))
    if const is not None and any(_gain_cell(row, const) != DASH for row in rows):
        header.append(GAIN_SPLIT)
        align.append(RIGHT)
        for row, cells in zip(rows, body):
            cells.append(_gain_cell(row, const))
    header.append("Seeds")
    align.append(RIGHT)
    for row, cells in zip(rows, body):
        cells.append(str(len(row.results)))
    return Table(header, body, align, caption="main"), ref_name if ref is not None else None


def family_note(table: Table, ref_name: str | None) -> list[Block]:
    """How many paired differences the main table tests at 95%, and how many of them would be
    bold by chance alone if no predictor differed from the reference: the bold is not corrected
    for multiplicity, so the reader needs the family's size beside it."""
    columns = [j for j, h in enumerate(table.header) if h.startswith(("Δ vs", "Dyn. Δ vs"))]
    tested = [row[j] for row in table.rows for j in columns if "[" in row[j]]
    if ref_name is None or len(tested) < 2:
        return []
    bold = sum(cell.startswith("**") for cell in tested)
    return [Text(f"The Δ columns test {len(tested)} differences with {ref_name} at 95%, with no "
                 f"correction for multiplicity: if no predictor differed from it, about "
                 f"{0.05 * len(tested):.1f} of them would be bold by chance. {bold} are bold.")]


def front_table(rows: list[Row], table: Table) -> tuple[Table, list[str]]:
    """The main table as the front page shows it: a decoding variant only beside its paired Δ
    to the reference (one that cannot be paired is read on the world's page, next to the
    predictor it decodes). Returns the table and the labels of the variants left out."""
    deltas = [j for j, h in enumerate(table.header) if h.startswith("Δ vs")]
    keep, left_out = [], []
    for row, cells in zip(rows, table.rows):
        if row.variant is not None and not any(str(cells[j]) != DASH for j in deltas):
            left_out.append(row.label)
        else:
            keep.append(cells)
    return Table(table.header, keep, table.align, table.foot, table.caption), left_out
