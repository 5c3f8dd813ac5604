"""Writing a file so that a reader never sees half of it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any, **dumps: Any) -> None:
    """``data`` as JSON at ``path``, written beside it first and renamed into place (atomic on one file system);
    ``dumps``: :func:`json.dumps`' options. The temporary's name holds the process id, so two writers never share
    it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, **dumps))
    os.replace(tmp, path)
