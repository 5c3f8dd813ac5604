"""``python -m bakeoff.cli ARGS``: the ``bakeoff`` command (:func:`bakeoff.cli.main.main`)."""

import sys

from bakeoff.cli.main import main

sys.exit(main())
