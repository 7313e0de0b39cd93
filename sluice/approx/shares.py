"""Fair shares of a memory limit among the streams whose elements hold it: drops aimed at the
memory that causes them (design 021, "Drops aimed at the culprit").

When state that sampling cannot shrink — an unbounded group-by, ``[Rows N]``, a stream an
exact-only or unsafe query reads — fills the limit, sampling the other streams frees only what
they hold, and what their windows release as they slide is taken at once by the growing state: a
stream holding 6% of the memory lost 88% of its elements while the culprit was shed anyway.
Max-min fairness instead: each stream is entitled to what it wants (what its elements within its
horizon would hold were none dropped: sampled or shed, a stream still wants it), as long as the
streams wanting more share the rest equally (water filling).
A stream within its share is not lowered below it by the allocator, and the room it will need
again is reserved from a stream over its share at admission; the one over its share is the
culprit, named in the event, and its elements are the ones shed.

>>> sorted(water_fill({"a": 250_000.0, "b": 2_000.0, "c": 30_000.0}, 28_000.0).items())
[('a', 13000.0), ('b', 2000.0), ('c', 13000.0)]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


def water_fill(wants: Mapping[str, float], total: float) -> dict[str, float]:
    """Max-min fair shares of ``total`` bytes: the smallest wants in full, the rest equally."""
    out: dict[str, float] = {}
    left = max(total, 0.0)
    order = sorted(wants.items(), key=lambda kv: kv[1])
    for i, (s, w) in enumerate(order):
        give = min(max(w, 0.0), left / (len(order) - i))
        out[s] = give
        left -= give
    return out


@dataclass
class FairShares:
    """Each stream's want — what its elements within its horizon would hold had none been
    dropped — and its share of what the limit leaves the streams.
    """

    wants: dict[str, float] = field(default_factory=dict)
    share: dict[str, float] = field(default_factory=dict)
    tight: bool = False  # the streams want more than the limit leaves them: shares bind
    seen: dict[str, int] = field(default_factory=dict)  # elements offered per stream at the last update
    total: float = 0.0  # what the limit leaves the streams (bytes)

    def update(self, wants: Mapping[str, float], total: float) -> None:
        """After a run: ``wants`` per stream now, ``total`` the bytes the limit leaves streams."""
        self.wants, self.total = dict(wants), total
        self.share = water_fill(self.wants, total)
        self.tight = sum(self.wants.values()) > total

    def shares(self, total: float) -> dict[str, float]:
        return water_fill(self.wants, total)

    @staticmethod
    def over(share: Mapping[str, float], held: Mapping[str, float]) -> list[str]:
        """Streams holding more than their share (by more than a hundredth of it: not at it)."""
        return sorted(s for s, sh in share.items() if held.get(s, 0.0) > sh * 1.01)

    def floors(self, share: Mapping[str, float], streams: list[str]) -> dict[str, float]:
        """The least rate keeping each of ``streams`` at its share of what it wants."""
        return {s: min(1.0, share.get(s, 0.0) / self.wants[s]) for s in streams if self.wants.get(s, 0.0) > 0}
