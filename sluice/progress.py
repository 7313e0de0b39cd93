"""Progress bars for long commands (``sluice run``, ``gen``, ``experiment``, ``bench``): on stderr,
with rate and ETA (tqdm), shown only on a terminal — quiet in pipes, logs and tests.
"""

from __future__ import annotations

import sys
from typing import Any


def progress(desc: str, total: int | None = None, unit: str = "rows") -> Any:
    """A tqdm bar on stderr (``disable=None``: off when stderr is not a terminal)."""
    from tqdm import tqdm

    return tqdm(desc=desc, total=total, unit=unit, unit_scale=True, disable=None, file=sys.stderr, leave=False)


def say(line: str) -> None:
    """Print a line to stderr without breaking a progress bar that is showing."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)
    sys.stderr.flush()
