"""The style and script written into every page of the site, so a page needs no other file and
fetches nothing: it opens from file:// on a machine without a network."""

from __future__ import annotations

# Only inline style and script run, and images load from the page's own folder: a page cannot
# reach another host even if a result held a hostile string that escaped the escaping.
CSP = ("default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; "
       "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'")

STYLE = """
:root { --fg: #1d2430; --muted: #5b6574; --line: #d8dde5; --head: #f3f5f8; --accent: #1f5fa8;
  --warn: #8a4b00; --row: #fafbfc; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff; overflow-wrap: break-word;
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  sans-serif; }
header.top { background: #1d2430; color: #fff; padding: .5rem 1rem; display: flex;
  flex-wrap: wrap; gap: .25rem 1rem; align-items: baseline; }
header.top a { color: #fff; text-decoration: none; }
header.top a.home { font-weight: 600; margin-right: .5rem; }
header.top a:hover, header.top a[aria-current] { text-decoration: underline; }
header.top .worlds { display: flex; flex-wrap: wrap; gap: .15rem .9rem; font-size: .9rem; }
header.top code { background: none; color: inherit; padding: 0; }
main { margin: 0 auto; padding: .5rem 1.5rem 3rem; }
h1 { font-size: 1.5rem; margin: 1rem 0 .5rem; }
h2 { font-size: 1.2rem; margin: 1.8rem 0 .5rem; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.3rem 0 .4rem; }
p, main > ul, .card dl { margin: .4rem 0 .8rem; max-width: 75rem; }
a { color: var(--accent); }
code { font: .88em/1.3 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  background: var(--head); padding: 0 .2em; border-radius: 3px; overflow-wrap: anywhere; }
nav.toc { font-size: .9rem; border: 1px solid var(--line); border-radius: 6px;
  padding: .4rem 1rem .5rem; margin: .5rem 0 1rem; max-width: 75rem; }
nav.toc h2 { font-size: .95rem; margin: 0 0 .2rem; border: 0; color: var(--muted); }
nav.toc ol { margin: 0; padding-left: 1.3rem; }
nav.toc > ol { columns: 3 15rem; column-gap: 2rem; }
nav.toc > ol > li { break-inside: avoid; }
nav.toc ol ol { font-size: .85rem; list-style: lower-alpha; }
nav.toc.inline { border: 0; padding: 0; }
nav.toc.inline h2 { display: none; }
nav.toc.inline > ol { columns: auto; display: flex; flex-wrap: wrap; gap: .1rem 1.2rem;
  padding: 0; list-style: none; }
.scroll { overflow-x: auto; max-width: 100%; margin: .5rem 0 1rem; border: 1px solid var(--line);
  border-radius: 4px; -webkit-overflow-scrolling: touch; overscroll-behavior-x: contain; }
.scroll:focus-visible { outline: 2px solid var(--accent); }
table { border-collapse: collapse; font-size: .88rem; width: max-content; min-width: 100%; }
th, td { padding: .3rem .55rem; border-bottom: 1px solid var(--line); text-align: right;
  white-space: nowrap; vertical-align: top; }
th.l, td.l { text-align: left; }
td.l:first-child { white-space: normal; min-width: 10rem; max-width: 26rem;
  overflow-wrap: anywhere; }
td.prose { white-space: normal; min-width: 16rem; max-width: 30rem; text-align: left; }
thead th { background: var(--head); position: sticky; top: 0; font-weight: 600;
  cursor: pointer; }
th button { font: inherit; color: inherit; background: none; border: 0; padding: 0;
  cursor: pointer; text-align: inherit; }
th button::after { content: " \\2195"; color: #9aa3af; font-size: .8em; }
th[aria-sort=ascending] button::after { content: " \\2191"; color: var(--fg); }
th[aria-sort=descending] button::after { content: " \\2193"; color: var(--fg); }
th a.g { font-size: .75em; margin-left: .2rem; text-decoration: none; vertical-align: super; }
th a.page { font-size: .75em; font-weight: 400; margin-left: .3rem; white-space: nowrap; }
tbody tr, tfoot tr { background: #fff; }
tbody tr:nth-child(even) { background: var(--row); }
tbody td:first-child, tfoot td:first-child { position: sticky; left: 0; z-index: 1;
  background: inherit; box-shadow: inset -1px 0 var(--line); }
thead th:first-child { left: 0; z-index: 2; box-shadow: inset -1px 0 var(--line); }
#overview th[data-world] { white-space: normal; min-width: 8rem; max-width: 13rem; }
#overview th[data-world] button { overflow-wrap: anywhere; }
#overview td:nth-child(2) { white-space: normal; max-width: 9rem; font-size: .8rem;
  color: var(--muted); }
tbody tr:hover { background: #eef4fb; }
tfoot td { color: var(--muted); font-style: italic; }
td.few { color: var(--muted); }
th .few, .warn { color: var(--warn); }
.rank { display: inline-block; min-width: 1.6rem; font-weight: 600; }
img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line);
  border-radius: 4px; }
figure { margin: .5rem 0 1rem; }
figcaption { font-size: .85rem; color: var(--muted); }
.card { border: 1px solid var(--line); border-radius: 6px; padding: .3rem 1rem .6rem;
  background: var(--row); }
.card h2 { margin-top: .5rem; }
.card dl { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem;
  margin: .5rem 0; }
.card dt { font-weight: 600; }
.card dd { margin: 0; }
.card p { font-size: .9rem; color: var(--muted); }
dl.glossary dt { font-weight: 600; margin-top: .8rem; }
dl.glossary dd { margin: .2rem 0 0; max-width: 75rem; }
:target { background: #fff6d6; }
fieldset { border: 1px solid var(--line); border-radius: 4px; margin: .4rem 0;
  padding: .3rem .7rem; min-width: 0; }
fieldset label { display: inline-block; margin: .1rem .9rem .1rem 0; font-size: .9rem;
  overflow-wrap: anywhere; }
legend { font-size: .85rem; color: var(--muted); }
ul.files { columns: 2 24rem; font-size: .9rem; }
[hidden] { display: none !important; }
@media (max-width: 700px) {
  body { font-size: 14px; }
  header.top { padding: .4rem .6rem; }
  header.top .worlds { flex-wrap: nowrap; overflow-x: auto; white-space: nowrap;
    max-width: 100%; padding-bottom: .2rem; }
  main { padding: .3rem .6rem 2rem; }
  h1 { font-size: 1.3rem; }
  th, td { padding: .25rem .4rem; }
  td.l:first-child { min-width: 5.5rem; max-width: 8rem; }
  /* any cell fits beside the sticky first column, so it reads without scrolling back */
  td { white-space: normal; max-width: calc(100vw - 11rem); }
  td.prose { min-width: calc(100vw - 11rem); max-width: calc(100vw - 11rem); font-size: .8rem;
    line-height: 1.35; }
  #overview th[data-world] { min-width: 7rem; max-width: 9rem; }
  nav.toc > ol { columns: 1; }
  #overview th:nth-child(2), #overview td:nth-child(2) { display: none; }
  .card dl { grid-template-columns: 1fr; }
  .card dd { margin-bottom: .3rem; }
}
"""

# Sorting: a click on a header (its text, or anywhere on it but a link) sorts its table by that
# column, ascending, then descending on the next click. A column whose filled cells all carry
# data-v (the number the cell starts with) sorts by it, any other by its text with the numbers
# in it compared as numbers; empty cells and cells of a dash sort last both ways; tfoot rows
# stay put. Filtering (index): world check boxes hide columns, kind check boxes hide rows, and a
# row left with no figure in any shown world is hidden too.
SCRIPT = """
(function () {
  'use strict';
  function text(cell) { return cell ? cell.textContent.trim() : ''; }
  function missing(cell) {
    if (!cell) return true;
    if (cell.hasAttribute('data-v')) return false;
    var t = text(cell);
    return t === '' || t.charAt(0) === '\\u2014';
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var numeric = rows.every(function (r) {
      var c = r.cells[col];
      return missing(c) || c.hasAttribute('data-v');
    });
    var dir = th.getAttribute('aria-sort') === 'ascending' ? -1 : 1;
    rows.sort(function (a, b) {
      var x = a.cells[col], y = b.cells[col], mx = missing(x), my = missing(y);
      if (mx || my) return mx === my ? 0 : (mx ? 1 : -1);
      var d = numeric ? parseFloat(x.getAttribute('data-v')) - parseFloat(y.getAttribute('data-v'))
                      : text(x).localeCompare(text(y), undefined, {numeric: true});
      return d * dir;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      h.removeAttribute('aria-sort');
    });
    th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener('click', function (event) {
        if (event.target.closest('a')) return;
        sortBy(table, col, th);
      });
    });
  });
  var filters = document.getElementById('filters');
  var overview = document.getElementById('overview');
  if (!filters || !overview) return;
  function apply() {
    var shown = {}, kinds = {};
    filters.querySelectorAll('input[data-world]').forEach(function (box) {
      shown[box.getAttribute('data-world')] = box.checked;
    });
    filters.querySelectorAll('input[data-kind]').forEach(function (box) {
      kinds[box.getAttribute('data-kind')] = box.checked;
    });
    overview.querySelectorAll('[data-world]').forEach(function (cell) {
      cell.hidden = !shown[cell.getAttribute('data-world')];
    });
    Array.prototype.forEach.call(overview.tBodies[0].rows, function (row) {
      var kindOk = row.getAttribute('data-kinds').split(' ').some(function (k) {
        return kinds[k];
      });
      var filled = Array.prototype.some.call(row.querySelectorAll('td[data-world]'),
        function (cell) { return !cell.hidden && text(cell) !== ''; });
      row.hidden = !(kindOk && filled);
    });
  }
  filters.addEventListener('change', apply);
  apply();
})();
"""
