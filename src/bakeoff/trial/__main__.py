"""``python -m bakeoff.trial REQUEST.json`` (or, by hand, ``SPEC.json RESULT.json [CHECKPOINT_DIR [TENSORBOARD_DIR]]``):
one trial (:mod:`.main`)."""

# First, before any other import: a rank whose launcher (torchrun) dies goes with it.
from bakeoff.core.tether import die_with_parent

die_with_parent()

import sys  # noqa: E402 (after the tether, on purpose)

from bakeoff.trial.main import main  # noqa: E402

sys.exit(main())
