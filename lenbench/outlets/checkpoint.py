"""Training that outlives its process: a fit of hours keeps its state after every epoch, and a
rerun of the same fit resumes after the last kept epoch, or, once the fit finished, loads its
weights without training.

A draft on world v2 trains for hours on two cores; a run stopped in its prediction or its
audit, or cut off mid-training, would otherwise start over. Where the harness names its cache
folder (`CacheHome`), each fit is a stage `cache_dir/outlets_train/<key>/`, keyed by everything
its trajectory depends on (`fit_config`): the target, the training and validation rows, the
target cache it reads, the training settings, the seed, which parameters train, and a hash of
the draft's weights as the fit starts (so the length-head phase of sd_only, which starts from a
trained backbone, has its own key). While it trains, `<key>.partial/state.pt` holds the draft,
the optimiser, the schedule, the random streams and the early-stopping record after the last
finished epoch; on the same machine a resumed fit ends with the weights an uninterrupted one
would have. A finished fit's weights and record go to `<key>/final.pt`.
"""

from __future__ import annotations

import hashlib
import io
import logging
from pathlib import Path
from typing import Any

import torch

from lenbench.outlets.batches import Sequence, TrainConfig
from lenbench.outlets.modeling import DraftModel
from lenbench.outlets.target_cache import CacheHome, rows_fingerprint
from lenbench.stages import Stage, atomic_write_bytes

log = logging.getLogger(__name__)
STAGE = "outlets_train"
CHECKPOINT_FORMAT = 1  # raised when what a checkpoint holds changes, so older ones are ignored
EPOCH_FILE = "state.pt"
FINAL_FILE = "final.pt"


def weights_fingerprint(module: torch.nn.Module) -> str:
    """A hash of every tensor in the module's state, by name: the weights a fit starts from."""
    digest = hashlib.sha256()
    for name, value in sorted(module.state_dict().items()):
        digest.update(name.encode() + str(value.dtype).encode() + str(tuple(value.shape)).encode())
        digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def fit_config(home: CacheHome, draft: DraftModel, seqs: list[Sequence], cfg: TrainConfig,
               seed: int, train_backbone: bool, cache_record: dict,
               val_seqs: list[Sequence] | None, val_cached: bool) -> dict:
    """Everything a fit's trajectory depends on. The variant's name is not here: two variants
    with the same draft, settings and starting weights train the same."""
    device = next(draft.parameters()).device.type
    return {"format": CHECKPOINT_FORMAT, "target": home.target_key, "device": device,
            "rows": rows_fingerprint(seqs, cfg.max_len), "n_rows": len(seqs),
            "val_rows": rows_fingerprint(val_seqs, cfg.max_len) if val_seqs else None,
            "val_cached": bool(val_cached) if val_seqs else None,
            "target_cache": {k: cache_record.get(k) for k in ("mode", "key", "dtype", "teacher")},
            "train": cfg.to_dict(), "seed": int(seed), "train_backbone": bool(train_backbone),
            "draft": draft.cfg.to_dict(), "start_weights": weights_fingerprint(draft)}


def _save(path: Path, payload: dict) -> None:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


class TrainCheckpoint:
    """One fit's stage: the last finished epoch's state while it trains, its result once done."""

    def __init__(self, stage: Stage):
        self.stage = stage

    @classmethod
    def for_fit(cls, home: CacheHome, **fit: Any) -> TrainCheckpoint:
        """The stage of the fit `fit_config(home, **fit)` describes."""
        return cls(Stage(home.cache_dir, STAGE, fit_config(home, **fit)))

    @property
    def key(self) -> str:
        return self.stage.key

    @property
    def done(self) -> bool:
        return self.stage.done and (self.stage.path / FINAL_FILE).exists()

    def last_epoch(self) -> dict | None:
        """The state saved after the last finished epoch of an interrupted fit, if any."""
        path = self.stage.partial / EPOCH_FILE
        if not path.exists():
            return None
        try:
            return _load(path)
        except Exception as err:  # a torn file cannot be here (atomic writes), a foreign one can
            log.warning("outlets training checkpoint %s unreadable (%s): training from the "
                        "start", path, err)
            return None

    def save_epoch(self, state: dict) -> None:
        self.stage.partial.mkdir(parents=True, exist_ok=True)
        _save(self.stage.partial / EPOCH_FILE, state)

    def finish(self, draft: DraftModel, record: dict) -> None:
        """Keep the fitted weights and the fit's record; the epoch state goes."""
        with self.stage.building(resume=True) as folder:
            _save(folder / FINAL_FILE, {"draft": draft.trained_state(), "record": record})
            (folder / EPOCH_FILE).unlink(missing_ok=True)

    def load_final(self, draft: DraftModel) -> dict:
        """Put the finished fit's weights into `draft`; return its record."""
        saved = _load(self.stage.path / FINAL_FILE)
        self.put_back(draft, saved["draft"])
        return saved["record"]

    def put_back(self, draft: DraftModel, weights: dict[str, torch.Tensor]) -> None:
        """Load weights this fit kept into `draft`; weights of another draft are refused with
        the folders to delete."""
        try:
            draft.load_trained_state(weights)
        except ValueError as err:
            raise ValueError(f"{err}; delete {self.stage.path} and {self.stage.partial} to "
                             "train this fit from scratch") from err


def epoch_seconds(epoch: dict) -> float:
    """An epoch's training and validation seconds (`val_seconds` is absent in older records)."""
    return float(epoch["seconds"]) + float(epoch.get("val_seconds", 0.0))


def earlier_seconds(record: dict) -> float:
    """Seconds of a `train_draft` record's epochs (training and validation) that earlier runs
    spent: every epoch of a reused fit, the epochs before the resume of a resumed one. Neither
    the shared target cache's build nor the unfinished epoch of a killed run counts."""
    saved = record.get("checkpoint") or {}
    epochs = record.get("history") or []
    if saved.get("reused"):
        return sum(epoch_seconds(e) for e in epochs)
    resumed = saved.get("resumed_after_epoch")
    if resumed is None:
        return 0.0
    return sum(epoch_seconds(e) for e in epochs if e["epoch"] <= resumed)
