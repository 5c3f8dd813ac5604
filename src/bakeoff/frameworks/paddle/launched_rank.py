"""``python -m bakeoff.frameworks.paddle.launched_rank REQUEST.json``: one rank that ``paddle.distributed.launch``
started (:mod:`bakeoff.frameworks.paddle.launch`). It says, in bakeoff's terms, where Paddle placed it, runs the
trial as its one child (``python -m bakeoff.trial REQUEST.json``) and reports how the trial ended:

- its rank, ``PADDLE_TRAINER_ID``, becomes :class:`bakeoff.core.contract.Placement`'s rank (the rank's result file,
  and the rank the trial records);
- its local rank, the GPU it takes: the launcher's machine-wide one (one launcher per node) plus Paddle's
  ``PADDLE_LOCAL_RANK`` (its index among its launcher's ranks), as torchrun's ``LOCAL_RANK`` is added; Paddle's own
  ``FLAGS_selected_gpus`` (which its launcher sets to the index among the launcher's ranks) is made the same;
- the trial's ``CUDA_VISIBLE_DEVICES`` comes back, which the launcher ran without;
- the copies of its whole environment Paddle's launcher wrote into the trial's log folder are removed
  (:func:`forget_environment`).

Why a child. Paddle's launcher names, of the ranks dead when it looks (once a second), the first *in its list*, not
the first to fail: rank 1 killed, rank 0 aborts on the lost peer a moment later, and the launcher blames rank 0.
So each rank's trial runs under this process, which outlives it: when the trial fails it records the time and code
in the trial's launch folder (shared by every launcher of the trial), and says, as its log's last line, the rank
that failed first of those recorded (:data:`launch.FIRST_FAILURE_SAYS`), which the runner reads from the launcher's
log (:func:`launch.paddle_root_cause`). Then it ends as its trial ended (by the same signal, or with the same
code). The trial dies with it (its tether), and it with its launcher. Imports no framework.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path

from bakeoff.core.contract import LAUNCHED_AT_ENV, LOCAL_RANK_ENV, Placement
from bakeoff.core.launching import trial_command
from bakeoff.core.tether import die_with_parent
from bakeoff.frameworks.paddle.launch import FIRST_FAILURE_SAYS, HIDDEN_DEVICES_ENV

log = logging.getLogger(__name__)


def place(environ: MutableMapping[str, str]) -> int:
    """Write this rank's placement (module docstring) into ``environ``; return its rank."""
    rank = int(environ.get("PADDLE_TRAINER_ID") or 0)
    local = (Placement.read(environ).local_rank or 0) + int(environ.get("PADDLE_LOCAL_RANK") or 0)
    environ.update(Placement(rank=rank).env())
    environ[LOCAL_RANK_ENV] = str(local)
    if "FLAGS_selected_gpus" in environ:
        environ["FLAGS_selected_gpus"] = str(local)
    if HIDDEN_DEVICES_ENV in environ:
        environ["CUDA_VISIBLE_DEVICES"] = environ.pop(HIDDEN_DEVICES_ENV)
    return rank


def first_failure(folder: Path, rank: int, code: int, group: str) -> tuple[int, int]:
    """Record that ``rank`` failed with ``code`` now (in ``folder``, for the launch ``group``: its launch time) and
    return the (rank, code) recorded first of this launch's failures."""
    folder.mkdir(parents=True, exist_ok=True)
    mine = folder / f"rank{rank}"
    mine.with_suffix(".tmp").write_text(f"{time.time()!r} {code} {group}")
    mine.with_suffix(".tmp").replace(mine)
    failures = []
    for path in folder.glob("rank*"):
        with contextlib.suppress(OSError, ValueError):
            when, said, launch = path.read_text().split()
            if launch == group and path.suffix != ".tmp":
                failures.append((float(when), int(path.name.removeprefix("rank")), int(said)))
    _, first, first_code = min(failures, default=(0.0, rank, code))
    return first, first_code


def forget_environment(environ: MutableMapping[str, str], backup: bool) -> None:
    """Remove a copy of this rank's whole environment that Paddle's launcher wrote beside its log before it started
    the rank: ``envlog.<i>``, which nothing reads, or (``backup``) ``backup_env.<rank>.json``, which Paddle reads
    for variables too long to pass (``paddle.distributed.backup_env``), once the trial has ended. The trial's log
    folder is the store's, and a user's environment (tokens included) has no place there."""
    if not environ.get("PADDLE_LOG_DIR"):
        return
    copy = environ.get("PADDLE_BACKUP_ENV_PATH", "") if backup else f"envlog.{environ.get('PADDLE_LOCAL_RANK', '')}"
    with contextlib.suppress(OSError):
        (Path(environ["PADDLE_LOG_DIR"]) / copy).unlink()


def main(argv: list[str] | None = None) -> int:
    """Place this rank, run its trial as a child and return the trial's exit code (module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    forget_environment(os.environ, backup=False)
    env = dict(os.environ)
    rank = place(env)
    child = subprocess.Popen(trial_command(argv), env=env)
    while True:
        try:
            code = child.wait()
            break
        except KeyboardInterrupt:  # the launcher's group got SIGINT: the trial got it too, and ends
            continue
    forget_environment(env, backup=True)
    if code:
        folder = Path(env.get("PADDLE_LOG_DIR", ".")).parent / "failures"
        first, first_code = first_failure(folder, rank, code, env.get(LAUNCHED_AT_ENV, "-"))
        logging.basicConfig(level=logging.WARNING)
        log.error(FIRST_FAILURE_SAYS.format(rank=first, code=first_code))
    return code


if __name__ == "__main__":
    die_with_parent()  # first: a rank whose launcher dies goes with it
    ended = main()
    if ended < 0:  # killed by a signal: end the same way, so the launcher reports what killed the trial
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's and SIGSTOP's cannot be set
            signal.signal(-ended, signal.SIG_DFL)
        os.kill(os.getpid(), -ended)
    sys.exit(ended)
