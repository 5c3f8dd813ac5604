"""``python -m bakeoff.frameworks.paddle.launched_rank REQUEST.json``: one rank that ``paddle.distributed.launch``
started (:mod:`bakeoff.frameworks.paddle.launch`). It says, in bakeoff's terms, where Paddle placed it, then runs
the trial (:func:`bakeoff.trial.main.main`) in this process:

- its rank, ``PADDLE_TRAINER_ID``, as :class:`bakeoff.core.contract.Placement`'s rank (the rank's result file, and
  the rank the trial records);
- its local rank, the GPU it takes: the launcher's machine-wide one (one launcher per node) plus Paddle's
  ``PADDLE_LOCAL_RANK`` (its index among its launcher's ranks), as torchrun's ``LOCAL_RANK`` is added; Paddle's own
  ``FLAGS_selected_gpus`` (which its launcher sets to its index among the launcher's ranks) is made the same;
- the trial's ``CUDA_VISIBLE_DEVICES`` back, which the launcher ran without.

When the trial exits non-zero its last line says so, with its rank (:data:`launch.FAILED_SAYS`), which the runner
reads when the launcher's own line is cut from the log's tail. Imports no framework (the trial imports Paddle).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping

from bakeoff.core.tether import die_with_parent

log = logging.getLogger(__name__)


def place(environ: MutableMapping[str, str]) -> int:
    """Write this rank's placement (module docstring) into ``environ``; return its rank."""
    from bakeoff.core.contract import LOCAL_RANK_ENV, Placement
    from bakeoff.frameworks.paddle.launch import HIDDEN_DEVICES_ENV

    rank = int(environ.get("PADDLE_TRAINER_ID") or 0)
    local = (Placement.read(environ).local_rank or 0) + int(environ.get("PADDLE_LOCAL_RANK") or 0)
    environ.update(Placement(rank=rank).env())
    environ[LOCAL_RANK_ENV] = str(local)
    if "FLAGS_selected_gpus" in environ:
        environ["FLAGS_selected_gpus"] = str(local)
    if HIDDEN_DEVICES_ENV in environ:
        environ["CUDA_VISIBLE_DEVICES"] = environ.pop(HIDDEN_DEVICES_ENV)
    return rank


def main(argv: list[str] | None = None) -> int:
    """Place this rank, run its trial and return the trial's exit code."""
    from bakeoff.frameworks.paddle.launch import FAILED_SAYS
    from bakeoff.trial.main import main as trial_main

    rank = place(os.environ)
    code = 1
    try:
        code = trial_main(argv)
    finally:
        if code:
            log.error(FAILED_SAYS.format(rank=rank, code=code))
    return code


if __name__ == "__main__":
    die_with_parent()  # first: a rank whose launcher dies goes with it
    sys.exit(main())
