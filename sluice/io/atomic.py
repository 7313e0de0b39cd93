"""Files that appear whole or not at all: write beside, fsync, rename (POSIX ``rename`` is atomic
within a directory). Used by checkpoints, so a kill mid-write leaves the previous one intact.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temp file in the same directory, fsync, rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(p)
