"""The JSON every benchmark writes: its name, the machine, and its own fields."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any


def write_results(out: str | Path, benchmark: str, **fields: Any) -> dict[str, Any]:
    doc = {
        "benchmark": benchmark,
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
        **fields,
    }
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def claim(text: str, paper: str, agrees: bool | None, measured: Any, why: str) -> dict[str, Any]:
    """One claim of a paper against the measured figures; ``agrees`` None: not checkable at this scale."""
    return {
        "claim": text,
        "paper": paper,
        "agrees": None if agrees is None else bool(agrees),
        "measured": measured,
        "why": why,
    }
