"""Windows that may shrink (``[Range T At Least t]``, ``[Rows N At Least m]``) cut and grown back
by the resource manager (``sluice.approx.manager``: when, and by what factor; design 021, "Windows
that may shrink").  Each returns what it changed, for the manager's event.
"""

from __future__ import annotations

from collections.abc import Iterable

from sluice.approx.report import Resizable

GROW = 1.25  # shrunk windows grow by this factor an adjustment (gently: a window refills over its range)


def _change(op: Resizable, r0: int, r: int) -> str:
    return f"[{op.spec.window.describe()}] {r0}→{r} {op.unit}"


def shrink(windows: Iterable[Resizable], f: float) -> list[str]:
    """Cut each window to hold ``f`` of what it holds (never below ``At Least``)."""
    changed = []
    for op in windows:
        if not op.settled:
            continue  # its last cut is still leaving: cutting again would overshoot
        r0, held = op.range_now, op.occupied
        if int(held * f) >= held:
            continue  # (a [Rows N] not yet full, or empty: cutting it would free nothing)
        r = op.resize(int(held * f))  # (a [Rows N] not yet full: from the rows it holds)
        if r != r0:
            changed.append(_change(op, r0, r))
    return changed


def regrow(windows: Iterable[Resizable]) -> list[str]:
    """Grow each shrunk window that has refilled by ``GROW`` (at most to its full size)."""
    changed = []
    for op in windows:
        r0, full = op.range_now, op.full
        if r0 < full and op.refilled:
            r = op.resize(min(full, max(r0 + 1, int(r0 * GROW))))
            changed.append(_change(op, r0, r))
    return changed
