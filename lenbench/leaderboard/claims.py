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
reads each row of the world's table that has the figure, every predictor and each variant
(`{predictor}` in the path stands for its name), and `a,b,c` each of those listed; on both sides
of `vs` they read every pair but a predictor with itself (a variant pairs by its stored rows),
and `-` or `/` between two of them meets on the predictors both read. `figure = number [low,
high]` holds when the figure and its interval round to the number as written; a comparison with
a number compares the figure rounded as the number is written.

A sentence that compares predictors is checked against all of them, with two predicates:

    lowest * static.mae: bin_classifier/expectation, outlets     ("best", "second only to")
    highest * transfer.metrics.static.mae - * static.mae: lp_only, outlets   ("loses the most")
    separated lp_only vs mlp_probe scheduling.score                ("ahead of", "separated from")
    not separated mlp_probe,tfidf_ridge vs mlp_probe,tfidf_ridge static.mae   ("none separates")

`lowest figures: a, b` (or `highest`) holds when a is the lowest of the figures, b the lowest
of the rest, and so on, at each step: no predictor the figures read is left out. `separated
a vs b path` holds when the paired difference's 95% interval excludes 0 and both sides have
several seeds, the rule by which the leaderboard bolds a Δ; `not separated` when it does not;
with `*` or a list, for every pair read. `*predictors` reads each predictor's own row only, not
its decoding variants, for a sentence about the predictors' point predictions.

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
from lenbench.scoring.comparisons import separated

MARKER = re.compile(r"<!--\s*(world|check|given):(.*?)-->", re.S)
NUMBER = re.compile(r"(?:(?<![\w.])[-+−]|(?<![\w.+\-−]))(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)"
                    r"(?:\.\d+)?%?(?!\w|\.\d)")
LITERAL = re.compile(r"[-+−]?\d[\d,]*(?:\.\d+)?%?")
PREDICATE = re.compile(r"(lowest|highest|separated|not separated)\s+(.*)", re.S)
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


def table_rows(world: World, figures: Figures) -> list[str]:
    """Every row of the world's table: each predictor and each of its variants
    (`name/variant`), so that a claim about all of them leaves none out (references aside)."""
    t = figures.table
    keep = (t.dataset == world.dataset) & (t.model == world.model) & \
        t.labels.str.startswith(world.labels) & (t.kind == "predictor") & (t.variant != "")
    variants = {f"{p}/{v}" for p, v in zip(t[keep].predictor, t[keep].variant)}
    return sorted(set(figures.predictors(world)) | variants)


def _names(word: str, world: World, figures: Figures) -> list[str] | None:
    """The predictors a subject names: `*` every row of the table, `a,b,c` those listed; None
    for a single name (its figures are keyed by step alone)."""
    if word == "*":
        return table_rows(world, figures)
    if word == "*predictors":
        return sorted(figures.predictors(world))
    return word.split(",") if "," in word else None


def _read(figures: Figures, world: World, name: str, ref: str | None, path: str,
          step: int | None) -> Figure:
    """name's figure, or its paired difference to ref (`predictor/variant` on either side: that
    decoding's stored rows, for the static MAE and its parts)."""
    predictor, _, variant = name.partition("/")
    if ref is None:
        return figures.get(world, predictor, path, step, variant)
    return figures.paired(world, name, ref, path, step)


def _figure_term(text: str, world: World, figures: Figures) -> dict[Key, Figure]:
    """A figure term's values by (the predictor or pair a `*` or list reads, step)."""
    words = text.split()
    if len(words) == 4 and words[1] == "vs":
        subject, ref, spec = words[0], words[2], words[3]
    elif len(words) == 2:
        subject, ref, spec = words[0], None, words[1]
    else:
        raise FigureError(f"'{text}' is not 'predictor path', nor 'a vs b path'")
    path, _, at = spec.partition("@")
    many, refs = _names(subject, world, figures), _names(ref, world, figures) if ref else None
    out: dict[Key, Figure] = {}
    for name in many or [subject]:
        for other in refs or [ref]:
            if other == name:
                continue  # `a,b vs *`: each against every other
            label = " vs ".join(n for n, m in ((name, many), (other, refs)) if m)
            own = path.replace("{predictor}", name.partition("/")[0])
            try:
                steps: Sequence[int | None] = [None] if not at else \
                    figures.steps(world, name.partition("/")[0], own) if at == "all" else \
                    [int(s) for s in at.split(",")]
                out |= {(label, -1 if step is None else step):
                        _read(figures, world, name, other, own, step) for step in steps}
            except FigureError:
                if "*" not in (subject, ref):
                    raise  # `*` reads the predictors that have the figure
    if not out:
        raise FigureError(f"no predictor of {world} has {path}")
    return out


def _combine(a: dict[Key, Figure], b: dict[Key, Figure], op: str) -> dict[Key, Figure]:
    """a - b or a / b, key by key; a single figure on one side meets each of the other's, and
    two readings of every predictor meet on the predictors both have."""
    if len(a) == 1 or len(b) == 1:
        keys = list(b) if len(a) == 1 else list(a)
    elif set(a) == set(b):
        keys = list(a)
    elif all(name for name, _ in a) and (common := [k for k in a if k in b]):
        keys = common
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


def excludes_zero(ci: tuple[float, float]) -> bool:
    """Whether a paired difference's interval lies on one side of 0
    (`scoring.metrics.paired_difference`'s `excludes_zero`)."""
    return ci[0] > 0 or ci[1] < 0


def is_separated(fig: Figure) -> bool:
    """The leaderboard's rule for bolding a Δ (`scoring.comparisons.separated`): the interval
    excludes 0 and, where the figure records its seeds, both sides have several."""
    seeds = (2, 2) if fig.seeds is None else fig.seeds
    return fig.ci is not None and separated({"excludes_zero": excludes_zero(fig.ci),
                                             "seeds": list(seeds)})


def _where(key: Key) -> str:
    return f" ({_label(key)})" if _label(key) else ""


def _separation(claim: str, text: str, world: World, figures: Figures) -> list[str]:
    """`[not] separated a vs b path`: every pair read has a 95% interval that excludes 0 (holds
    0), so that "separated from" and "not separated" say what the table's bold says."""
    if len(text.split()) != 4 or text.split()[1] != "vs":
        return [f"'{claim}': separation is of a pair, 'a vs b path'"]
    wanted = not claim.startswith("not ")
    out = []
    for key, fig in _figure_term(text, world, figures).items():
        if fig.ci is None:
            out.append(f"'{claim}'{_where(key)}: the results give no interval")
        elif is_separated(fig) != wanted:
            seeds = "" if fig.seeds is None or min(fig.seeds) > 1 else \
                " (one seed on a side: never separated)"
            out.append(f"'{claim}'{_where(key)}: the results give {_fmt(fig.value)} "
                       f"[{_fmt(fig.ci[0])}, {_fmt(fig.ci[1])}]{seeds}")
    return out


def _ranking(claim: str, text: str, world: World, figures: Figures) -> list[str]:
    """`lowest figures: a, b` (or `highest`): a, then b, are the lowest of every predictor the
    figures read, at each step, so that "best" and "more than the others" leave none out."""
    terms, colon, names = text.rpartition(":")
    listed = [n.strip() for n in names.split(",") if n.strip()]
    side = _side(terms, world, figures) if colon else None
    if not listed or not isinstance(side, dict) or not all(name for name, _ in side):
        return [f"'{claim}': a ranking is 'lowest|highest figures: a[, b ...]', the figures "
                f"of several predictors (`*`, `a,b,c`)"]
    sign = 1.0 if claim.startswith("lowest") else -1.0
    out = []
    for step in sorted({s for _, s in side}):
        values = {name: fig.value for (name, s), fig in side.items() if s == step}
        where = f" (at {step})" if step >= 0 else ""
        if missing := [n for n in listed if n not in values]:
            out.append(f"'{claim}'{where}: the results give no figure for {', '.join(missing)}")
            continue
        for other, v in values.items():  # each row named once, at the first place it takes
            if beaten := next((name for i, name in enumerate(listed) if other not in
                               listed[:i + 1] and not sign * values[name] <= sign * v), None):
                out.append(f"'{claim}'{where}: {other} gives {_fmt(v)} against {beaten}'s "
                           f"{_fmt(values[beaten])}")
    return out


def check_claim(claim: str, world: World, figures: Figures) -> tuple[list[str], set[str]]:
    """(why the claim fails, empty when it holds; the numbers it cites, as `number_key`s)."""
    if found := PREDICATE.fullmatch(claim):
        cited = {number_key(s) for s in re.findall(r"@([\d,]+)", claim) for s in s.split(",")}
        check = _ranking if found.group(1) in ("lowest", "highest") else _separation
        try:
            return check(claim, found.group(2), world, figures), cited
        except (FigureError, ValueError) as exc:
            return [f"'{claim}': {exc}"], cited
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
