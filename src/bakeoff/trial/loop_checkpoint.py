"""The training loop's checkpoints (:func:`bakeoff.trial.loop.train`): the engine and the loop's state, saved
atomically and resumed bit for bit."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bakeoff.core.result import TrialResult
from bakeoff.engines.base import Engine

_RESUMABLE = ("step_times_s", "losses", "curve", "examples_per_step", "best_metric", "final_metric",
              "time_to_target_s", "steps_to_target")


def _save_state(directory: Path, engine: Engine, state: dict[str, Any], result: TrialResult) -> None:
    """Checkpoint the engine, then the loop's own state; the state file is written last and atomically, so a
    kill at any moment leaves either the previous complete checkpoint or the new one."""
    engine.save_checkpoint(directory / "engine")
    tmp = directory / "loop.json.tmp"
    tmp.write_text(json.dumps({**state, "result": {k: getattr(result, k) for k in _RESUMABLE}}))
    os.replace(tmp, directory / "loop.json")


def _resume(checkpoint_dir: Path | None, engine: Engine, result: TrialResult) -> dict[str, Any]:
    """The loop's state: from the checkpoint in ``checkpoint_dir`` when there is one (the engine and the result's
    figures so far loaded back), else from the start. ``consumed``: micro-batches of the current epoch already
    trained on (where a resumed run picks up); ``units``: each unit's count in every step's batch."""
    if checkpoint_dir is None or not (checkpoint_dir / "loop.json").exists():
        return {"step": 0, "epoch": 0, "consumed": 0, "train_s": 0.0, "units": {}}
    saved = json.loads((checkpoint_dir / "loop.json").read_text())
    engine.load_checkpoint(checkpoint_dir / "engine")
    for key, value in saved.pop("result").items():
        setattr(result, key, value)
    result.training.resumed_at_steps.append(saved["step"])
    return saved
