"""The claims a prose document makes about the leaderboard, checked against its results folder.

A reading of the tables (docs/findings.md) goes stale the moment a result is rerun, and a
sentence can say more than its table does. So each paragraph or list item carries, in HTML
comments the rendered page does not show, the figures it cites and the claims it makes about
them, and a test recomputes every one from the result files:

    <!-- world: sharegpt_wheel/smollm2-135m-instruct -->        (the section the checks below read)
    <!-- check: outlets static.mae = 127.4 [121.0, 133.7];
      outlets vs mlp_probe static.mae = +14.0 [+5.8, +22.5];
      outlets dynamic.mae_by_observed_steps@256 < mlp_probe dynamic.mae_by_observed_steps@256 -->
    <!-- given: 0.7 0.9 200 (the sampling settings and training steps, not figures) -->

A claim is `left REL right`, REL one of `=`, `<`, `>`, `<=`, `>=`. A side is a number (`127.4`,
`-22.0`, `49%`) or a figure: `predictor[/variant] path[@steps]` (`claim_figures.py` says which
paths exist), `a vs b path` for a's paired difference to b, and `-` or `/` between figures.
`@all` reads every step of a list figure, `@0,8,16` the ones listed; `*` for the predictor
reads each predictor of the world that has the figure (`{predictor}` in the path stands for its
name). `figure = number [low, high]` holds when the figure and its interval round to the number
as written; a comparison with a number compares the figure rounded as the number is written.

Every number written in a paragraph must be one its checks cite (a number of a claim, or a step
after `@`) or one listed as given: numbers that are not figures of the results (settings, a
paper's table, a benchmark's measurement). The sign does not matter ("22.0 tokens better" cites
-22.0); the digits written do ("0.50" is not "0.5").

    python -m lenbench.leaderboard.claims docs/findings.md --results leaderboard/results
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lenbench.leaderboard.claim_figures import Figure, FigureError, Figures, World

MARKER = re.compile(r"<!--\s*(world|check|given):(.*?)-->", re.S)
NUMBER = re.compile(r"(?:(?<![\w.])[-+−]|(?<![\w.+\-−]))(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)"
                    r"(?:\.\d+)?%?(?!\w|\.\d)")
LITERAL = re.compile(r"[-+−]?\d[\d,]*(?:\.\d+)?%?")
RELATIONS = {"=": None, "<": lambda a, b: a < b, ">": lambda a, b: a > b,
             "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}
# what a number in prose is not: code, a link's target, a subscript (y_{t+1}), a marker
_NOT_PROSE = re.compile(r"`[^`]*`|\]\([^)]*\)|\w+_\{[^}]*\}|<!--.*?-->", re.S)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")

Key = tuple[str, int]  # (the predictor a `*` stands for, or ""; the step, or -1)


def number_key(text: str) -> str:
    """A written number as coverage compares it: its digits, without sign, commas or %."""
    return re.sub(r"[-+−,%]", "", text)


@dataclass(frozen=True)
class Literal:
    """A number as written: its value (a percentage as a share) and its rounding unit."""

    text: str
    value: float
    unit: float
    percent: bool

    @classmethod
    def parse(cls, text: str, percent: bool = False) -> Literal:
        digits = text.replace("−", "-").replace(",", "").rstrip("%")
        percent = percent or text.endswith("%")
        scale = 0.01 if percent else 1.0
        decimals = len(digits.partition(".")[2])
        return cls(text, float(digits) * scale, 10.0 ** -decimals * scale, percent)

    def rounded(self, x: float) -> float:
        """x rounded to the digits this number is written with."""
        return round(x / self.unit) * self.unit

    def matches(self, x: float) -> bool:
        return abs(x - self.value) <= self.unit / 2 + 1e-9 * max(1.0, abs(x))


@dataclass
class Block:
    """A paragraph, list item, heading or table of the document, from its first line."""

    line: int
    text: str
    heading: bool = False


@dataclass
class Report:
    """What a check of a document found: one line per problem, and how many claims held."""

    problems: list[str] = field(default_factory=list)
    claims: int = 0


def blocks(text: str) -> Iterator[Block]:
    """The document's blocks: split at blank lines, headings and list items (a marker's lines
    stay with the block it is in); fenced code is left out."""
    current: Block | None = None
    fenced = in_marker = False
    for number, line in enumerate(text.splitlines(), 1):
        fence = line.lstrip().startswith("```") and not in_marker
        starts = fence or fenced or (not in_marker and (
            not line.strip() or line.startswith("#") or _LIST_ITEM.match(line)))
        if starts and current is not None:
            yield current
            current = None
        if fence:
            fenced = not fenced
        if fence or fenced or not line.strip():
            continue
        if current is None:
            current = Block(number, line, heading=line.startswith("#"))
        else:
            current.text += "\n" + line
        opened, closed = line.rfind("<!--"), line.rfind("-->")
        in_marker = opened > closed or (in_marker and closed < 0)
    if current is not None:
        yield current


def _figure_term(text: str, world: World, figures: Figures) -> dict[Key, Figure]:
    """A figure term's values by (predictor of a `*`, step)."""
    words = text.split()
    if len(words) == 4 and words[1] == "vs":
        subject, ref, spec = words[0], words[2], words[3]
    elif len(words) == 2:
        subject, ref, spec = words[0], None, words[1]
    else:
        raise FigureError(f"'{text}' is not 'predictor path', nor 'a vs b path'")
    path, _, at = spec.partition("@")
    names = figures.predictors(world) if subject == "*" else [subject]
    out: dict[Key, Figure] = {}
    for name in names:
        predictor, _, variant = name.partition("/")
        own = path.replace("{predictor}", predictor)
        steps: Sequence[int | None] = [None]
        if at:
            steps = figures.steps(world, predictor, own) if at == "all" else \
                [int(s) for s in at.split(",")]
        for step in steps:
            try:
                if ref is None:
                    value = figures.get(world, predictor, own, step, variant)
                else:
                    value = figures.paired(world, predictor, ref, own, step)
            except FigureError:
                if subject == "*":
                    continue  # `*` reads the predictors that have the figure
                raise
            out[(name if subject == "*" else "", -1 if step is None else step)] = value
    if not out:
        raise FigureError(f"no predictor of {world} has {path}")
    return out


def _combine(a: dict[Key, Figure], b: dict[Key, Figure], op: str) -> dict[Key, Figure]:
    if len(a) == 1 or len(b) == 1:
        keys = list(b) if len(a) == 1 else list(a)
    elif set(a) == set(b):
        keys = list(a)
    else:
        raise FigureError("the two sides read different predictors or steps")

    def pick(side: dict[Key, Figure], key: Key) -> Figure:
        return next(iter(side.values())) if len(side) == 1 else side[key]

    if op == "-":
        return {k: Figure(pick(a, k).value - pick(b, k).value) for k in keys}
    return {k: Figure(pick(a, k).value / pick(b, k).value) for k in keys}


def _side(text: str, world: World, figures: Figures) -> dict[Key, Figure] | Literal:
    """A side of a claim: a number, or figures joined by ' - ' and ' / '."""
    text = text.strip()
    if LITERAL.fullmatch(text):
        return Literal.parse(text)
    parts = re.split(r"\s([-/])\s", text)
    value = _figure_term(parts[0], world, figures)
    for op, term in zip(parts[1::2], parts[2::2]):
        value = _combine(value, _figure_term(term, world, figures), op)
    return value


def _label(key: Key) -> str:
    name, step = key
    return " ".join(p for p in (name, "" if step < 0 else f"at {step}") if p)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def check_claim(claim: str, world: World, figures: Figures) -> tuple[list[str], set[str]]:
    """(why the claim fails, empty when it holds; the numbers it cites, as `number_key`s)."""
    found = re.search(r"\s(<=|>=|=|<|>)\s", f" {claim} ")
    if found is None:
        return [f"'{claim}' has no relation (=, <, >, <=, >=)"], set()
    rel = found.group(1)
    left_text, right_text = f" {claim} "[:found.start()], f" {claim} "[found.end():]
    cited = {number_key(s) for s in re.findall(r"@([\d,]+)", claim) for s in s.split(",")}
    interval = None
    if rel == "=" and (m := re.fullmatch(r"\s*(\S+)\s*\[\s*(\S+)\s*,\s*(\S+)\s*\]\s*",
                                         right_text)):
        right_text, interval = m.group(1), (m.group(2), m.group(3))
    cited |= {number_key(t.strip()) for t in (left_text, right_text, *(interval or ()))
              if LITERAL.fullmatch(t.strip())}  # cited even where the figure cannot be read
    try:
        left, right = _side(left_text, world, figures), _side(right_text, world, figures)
    except (FigureError, ValueError) as exc:
        return [f"'{claim}': {exc}"], cited
    for side in (left, right):
        if isinstance(side, dict):
            cited |= {number_key(str(step)) for _, step in side if step >= 0}
    if isinstance(left, Literal) and isinstance(right, Literal):
        return [f"'{claim}' compares two numbers: name a figure"], cited
    return _failures(claim, rel, left, right, interval), cited


def _failures(claim: str, rel: str, left: dict[Key, Figure] | Literal,
              right: dict[Key, Figure] | Literal, interval: tuple[str, str] | None) -> list[str]:
    out = []
    if rel == "=":
        if not isinstance(right, Literal) or isinstance(left, Literal):
            return [f"'{claim}': '=' takes a figure on the left and a number on the right"]
        bounds = [Literal.parse(b, right.percent) for b in interval] if interval else []
        for key, fig in left.items():
            where = f" ({_label(key)})" if _label(key) else ""
            if not right.matches(fig.value):
                out.append(f"'{claim}'{where}: the results give {_fmt(fig.value)}")
            if bounds and fig.ci is None:
                out.append(f"'{claim}'{where}: the results give no interval")
            elif bounds and not (bounds[0].matches(fig.ci[0]) and bounds[1].matches(fig.ci[1])):
                out.append(f"'{claim}'{where}: the results give the interval "
                           f"[{_fmt(fig.ci[0])}, {_fmt(fig.ci[1])}]")
        return out
    holds = RELATIONS[rel]
    if isinstance(left, Literal) or isinstance(right, Literal):
        lit = left if isinstance(left, Literal) else right
        figs = right if isinstance(left, Literal) else left
        for key, fig in figs.items():  # type: ignore[union-attr]
            a, b = (lit.value, lit.rounded(fig.value)) if lit is left else \
                (lit.rounded(fig.value), lit.value)
            if not holds(a, b):
                where = f" ({_label(key)})" if _label(key) else ""
                out.append(f"'{claim}'{where}: the results give {_fmt(fig.value)}")
        return out
    for key, fig in _combine(left, right, "-").items():
        if not holds(fig.value, 0.0) or math.isnan(fig.value):
            where = f" ({_label(key)})" if _label(key) else ""
            a = left.get(key, next(iter(left.values())))
            b = right.get(key, next(iter(right.values())))
            out.append(f"'{claim}'{where}: the results give {_fmt(a.value)} against "
                       f"{_fmt(b.value)}")
    return out


def check_text(text: str, figures: Figures, name: str = "document") -> Report:
    """Every claim of a document checked against `figures`, and every number of its prose
    matched to a claim or a given number of its block (module doc)."""
    report = Report()
    world: World | None = None
    for block in blocks(text):
        covered: set[str] = set()
        for marker in MARKER.finditer(block.text):
            kind, body = marker.group(1), " ".join(marker.group(2).split())
            where = f"{name}:{block.line + block.text.count(chr(10), 0, marker.start())}"
            if kind == "world":
                try:
                    world = World.parse(body)
                except FigureError as exc:
                    report.problems.append(f"{where}: {exc}")
            elif kind == "given":
                covered |= {number_key(n) for n in NUMBER.findall(body)}
            elif world is None:
                report.problems.append(f"{where}: a check before any world marker")
            else:
                for claim in filter(None, (c.strip() for c in body.split(";"))):
                    failures, cited = check_claim(claim, world, figures)
                    covered |= cited
                    report.claims += 1
                    report.problems += [f"{where}: {f}" for f in failures]
        if block.heading:
            continue
        prose = _NOT_PROSE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), block.text)
        for number in NUMBER.finditer(prose):
            if number_key(number.group()) not in covered:
                line = block.line + prose.count("\n", 0, number.start())
                report.problems.append(f"{name}:{line}: {number.group()} is cited by no check "
                                       f"of its paragraph (nor listed as given)")
    return report


def check_document(doc: str | Path, results_dir: str | Path) -> Report:
    """`check_text` of a file against a results folder."""
    path = Path(doc)
    return check_text(path.read_text(encoding="utf-8"), Figures(results_dir), path.name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lenbench.leaderboard.claims",
        description="Check a document's claims against the results they cite.")
    parser.add_argument("document", help="markdown file with world/check/given markers")
    parser.add_argument("--results", default="leaderboard/results",
                        help="results folder the claims are about (default: %(default)s)")
    args = parser.parse_args(argv)
    report = check_document(args.document, args.results)
    for line in report.problems:
        print(line)
    print(f"{report.claims} claims checked, {len(report.problems)} problems")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
