"""Results folder -> leaderboard: markdown tables per (dataset, model) and PNG plots beside them.

The leaderboard is a pure function of the results folder: no clock, no absolute path
and no machine state goes into README.md, and everything is sorted, so rebuilding from the same
folder gives byte-identical markdown and a diff of the leaderboard is a diff of the results.
Failed runs and unreadable files are listed, never dropped, so missing coverage stays visible.
Per (dataset, model), "Predictor details" shows what each predictor reported about itself
(`Predictor.report()`: flat entries, a speculative-decoding table) and every dynamic predictor's
MAE by observed steps; a report's ``row_labels`` name its rows in the main table.
`results_table` / `load_table` give every figure as one tidy pandas table (table.py); the rows
read their figures from it, and the main table's metric columns are specs (metric_specs.py).

README.md is the front page: the verdict, then each world's main table and a link to the world's own
``world-<stem>.md``, which holds all its tables and plots; captions are written once, in
``glossary.md`` (pages.py). Sections build blocks (blocks.py: headings, paragraphs, tables,
captions, images) and two renderers read them: the markdown, and a static web site beside it
(site.py, html.py): ``index.html`` sets the worlds side by side (predictors as rows, rank and static
MAE per world, the markdown's markers, filters by world and predictor kind) and
``world-<stem>.html`` holds one world's tables, plots, card and links to its result files. Every
table sorts by any column; captions sit once per page in a glossary linked from the column headers.
The pages carry their style and script inline and fetch nothing, so the folder opens from file://
offline (``lenbench-leaderboard --no-site`` skips them).
"""

from __future__ import annotations

from lenbench.leaderboard.document import build_leaderboard, main
from lenbench.leaderboard.table import load_table, results_table

__all__ = ["build_leaderboard", "load_table", "main", "results_table"]
