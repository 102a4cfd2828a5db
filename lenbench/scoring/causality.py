"""What a prediction may read of the scored split, and a view of some of its rows that changes the
rest.

`predict_remaining(split)` gets the dynamic view of the scored split
(lenbench/contract/views.py), which holds the whole true response because the protocol walks it
step by step. Reading it causally is the predictor's duty; lenbench/scoring/audit.py checks it
on the view this module builds.

What the dynamic protocol allows at step t (t tokens generated, L - t remaining, n prompt tokens):

* the static view's prompt side: prompts, prompt token ids and lengths, group ids, families,
  y_1, the pooled prompt states `hidden(role, pooling)`, the target model;
* the response tokens y_1 .. y_{t+1}, i.e. `sequence_token_ids(i)[:n + t + 1]`. y_{t+1} is
  allowed because it has been sampled from the logits at position n-1+t, and a draft model at step
  t reads it (OUTLETS/EAGLE-3: "the draft reads y_{t+1}");
* the step states of steps t' <= t (`steps.hidden`: the state at position n-1+t', or the entropy
  pool over positions 0..n-1+t'), and the pairing of each step with its row and t;
* the per-token entropy at positions 0 .. n-1+t (`entropy(i)[:n + t]`).

Nothing else: not y_{t+2} onwards, not the states of steps after t, not the entropy at positions
n+t onwards, not the row's number of response tokens or of steps (that is L), and nothing of
another row beyond what that row's own steps allow. The static view (`predict`,
`predict_variants`, `predict_distribution`) allows the prompt side and y_1 only.

`perturb(view, rows, rng)` returns a view of the drawn `rows` of the scored split (in their order;
lenbench/scoring/audit_plan.py draws them), each with a cut step c drawn among its steps, in which
everything that step c does not allow is changed:

* their response lengths are traded in pairs: two drawn rows with different sequence lengths
  n + L swap them (so L' != L for both), which leaves the drawn rows' multiset of sequence
  lengths and (at stride 1) their number of steps as they were. A drawn row without a partner
  keeps its length (`Perturbation.new_length` says which);
* their response tokens after y_{c+1} are replaced by other tokens (drawn from the drawn rows'
  own tokens, each different from the one it replaces), up to the new length; the steps after c
  follow the new length (their number changes with it);
* their step states after c are Gaussian noise with the per-dimension mean and std of the drawn
  rows' step states (every role and pooling the features stage holds), and their entropies at
  positions n+c onwards are uniform noise.

Prompt side, y_1 .. y_{c+1}, the states of steps <= c and the entropies at positions < n+c are
copied unchanged. The changes are made in the feature store itself, as the audit sees it
(lenbench/scoring/perturbed_store.py: the rows keep their index, nothing of the store is copied),
so a predictor that reads a drawn row through a store it kept from `fit` sees them too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from lenbench.contract.step_index import has_entropy
from lenbench.contract.views import SplitView
from lenbench.scoring.perturbed_store import PerturbedStore, RowChange, entropy_reader


@dataclass
class Perturbation:
    """A dynamic view of the drawn rows of the scored split, changed after a cut step each."""

    view: SplitView  # labels hidden; the drawn rows in the scored split's order
    rows: np.ndarray  # positions of the drawn rows in the scored split
    cuts: np.ndarray  # per drawn row, the cut step c
    old_length: np.ndarray  # per drawn row, L
    new_length: np.ndarray  # per drawn row, L'
    store: PerturbedStore | None  # the feature store with the drawn rows changed, if any

    def fixed(self, row: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Mask of the steps (row of `view`, t) whose estimate the protocol fixes: t <= c."""
        return np.asarray(t) <= self.cuts[np.asarray(row, dtype=np.int64)]

    def fixed_scored(self, row: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The same steps among the scored split's (row of the scored split, t): the steps
        t <= c of the drawn rows, in the order of `fixed`."""
        cut = np.full(int(self.rows.max()) + 1 if len(self.rows) else 0, -1, dtype=np.int64)
        cut[self.rows] = self.cuts
        row = np.asarray(row, dtype=np.int64)
        inside = row < len(cut)
        out = np.zeros(len(row), dtype=bool)
        out[inside] = np.asarray(t)[inside] <= cut[row[inside]]
        return out


def _other_tokens(rng: np.random.Generator, pool: np.ndarray, original: np.ndarray,
                  size: int) -> np.ndarray:
    """`size` tokens from `pool`; where `original` has a token at that place, a different one."""
    out = pool[rng.integers(0, len(pool), size)]
    if len(pool) > 1:
        same = np.flatnonzero(out[: len(original)] == original[: len(out)])
        for k in same:  # the next pool token over: different by construction
            out[k] = pool[(np.searchsorted(pool, out[k]) + 1) % len(pool)]
    return out


def _traded_lengths(rng: np.random.Generator, n: np.ndarray, L: np.ndarray,
                    floor: np.ndarray) -> np.ndarray:
    """New response lengths: rows swap their sequence lengths n + L in pairs (a pair must differ,
    and each new length must reach the row's `floor`); a row left without a partner keeps L."""
    total, new = n + L, L.copy()
    free = [int(i) for i in rng.permutation(len(L))]
    while free:
        a = free.pop(0)
        for k, b in enumerate(free):
            if total[a] != total[b] and total[b] - n[a] >= floor[a] \
                    and total[a] - n[b] >= floor[b]:
                new[a], new[b] = total[b] - n[a], total[a] - n[b]
                del free[k]
                break
    return new


def _stride(store, row_t: list[np.ndarray]) -> int:
    """The features stage's step stride (read from the drawn rows' steps when not recorded)."""
    stride = (getattr(store, "meta", None) or {}).get("step_stride")
    if stride is not None:
        return int(stride)
    gaps = np.concatenate([np.diff(ts) for ts in row_t]) if row_t else np.zeros(0)
    gaps = gaps[gaps > 0]
    return int(gaps.min()) if len(gaps) else 1


def _cut(rng: np.random.Generator, ts: np.ndarray, L: int, L2: int) -> int:
    """A cut step among the row's steps t < min(L, L'); for a row that keeps its length, one
    with a token after y_{c+1} to change (t < L - 1) when the row has such a step."""
    allowed = ts[ts < min(L, L2)]
    if L == L2 and (ts < L - 1).any():
        allowed = ts[ts < L - 1]
    return int(rng.choice(allowed))


def _has_steps(store) -> bool:
    return store is not None and hasattr(store, "step_offsets") and hasattr(store, "step_index")


def steps_per_row(view: SplitView) -> np.ndarray:
    """Each row's number of steps (its number of response tokens without step features)."""
    store = view._features
    if _has_steps(store):
        offsets = np.asarray(store.step_offsets, dtype=np.int64)
        return offsets[view._rows + 1] - offsets[view._rows]
    return view._table["L"].to_numpy(dtype=np.int64)


def perturb(view: SplitView, rows: np.ndarray, rng: np.random.Generator) -> Perturbation:
    """A view of the drawn `rows` of `view` (positions), each changed after a cut step
    (module docstring), its labels hidden; `rng` draws the pairs, cuts, tokens and noise."""
    table, store = view._table, view._features
    pick = np.sort(np.asarray(rows, dtype=np.int64))
    lengths = table["L"].to_numpy(dtype=np.int64)[pick]
    prompt_n = table["prompt_token_ids"].map(len).to_numpy(dtype=np.int64)[pick]
    originals = view._rows[pick]
    has_steps = _has_steps(store)
    if has_steps:
        offsets = np.asarray(store.step_offsets, dtype=np.int64)
        index = store.step_index()
        row_t = [np.asarray(index[offsets[g]: offsets[g + 1], 1], dtype=np.int64)
                 for g in originals]
    else:
        row_t = [np.zeros(1, np.int64) for _ in pick]
    floor = np.array([ts.min() + 1 for ts in row_t], dtype=np.int64)
    new_len = _traded_lengths(rng, prompt_n, lengths, floor)
    cuts = np.array([_cut(rng, ts, L, L2) for ts, L, L2 in zip(row_t, lengths, new_len)],
                    dtype=np.int64)
    responses = [np.asarray(x, dtype=np.int64) for x in table["output_token_ids"].iloc[pick]]
    prompts = [np.asarray(x, dtype=np.int64) for x in table["prompt_token_ids"].iloc[pick]]
    pool = np.unique(np.concatenate(prompts + responses)) if len(pick) else np.zeros(0, np.int64)
    if not len(pool):
        pool = np.zeros(1, np.int64)
    tokens = []
    for j in range(len(pick)):
        c, resp = int(cuts[j]), responses[j]
        if len(resp) >= lengths[j]:  # the response tokens are stored (not a label import)
            tail = _other_tokens(rng, pool, resp[c + 1:], int(new_len[j]) - (c + 1))
            resp = np.concatenate([resp[: c + 1], tail])
        tokens.append(resp.tolist())
    out = view._copy(pick, labels_visible=False)
    out._table = out._table.copy()
    out._table["output_token_ids"] = pd.Series(tokens, index=out._table.index, dtype=object)
    out._table["L"] = new_len
    changed = None
    if has_steps:
        changed = PerturbedStore(store, _changes(store, originals, row_t, prompt_n, cuts,
                                                 new_len, rng), int(rng.integers(2 ** 63)))
        out._features = changed
    return Perturbation(out, pick, cuts, lengths, new_len, changed)


def _changes(store, originals: np.ndarray, row_t: list[np.ndarray], prompt_n: np.ndarray,
             cuts: np.ndarray, new_len: np.ndarray, rng: np.random.Generator) -> list[RowChange]:
    """Per drawn row of the store: the steps kept (t <= c), the t of the new ones (those after
    c up to the new length, on the store's stride) and the new entropy."""
    stride = _stride(store, row_t)
    read = entropy_reader(store) if has_entropy(store) else None
    out = []
    for j, g in enumerate(originals):
        n, c, L2, ts = int(prompt_n[j]), int(cuts[j]), int(new_len[j]), row_t[j]
        later = np.arange(0, L2, stride)
        entropy = None
        if read is not None:
            ent = np.asarray(read(int(g)), dtype=np.float32)
            top = max(float(ent.max()) if len(ent) else 0.0, 1.0)  # nats
            entropy = np.concatenate([ent[: n + c], rng.uniform(
                0.0, top, max(L2 - c, 0)).astype(np.float32)])
        out.append(RowChange(int(g), int((ts <= c).sum()), later[later > c], entropy))
    return out
