"""The dataflow level's cost model (Getta & Vossough, "Optimization of Data Stream Processing",
§3.1): the cost of one dataflow expression (eq. 3), the order of its commutative operations that
minimises it, and whether an intermediate window pays for itself (eq. 1–2).

A dataflow expression δ_s is what one item appended to stream s goes through: it is recorded in
its window, then joined with the window of each other input in turn (§2.3).  Operation k takes
τ_k per item it reads and passes on f_k items per item (its fan-out), so (eq. 3)

    T_δ = τ_1 + β_1 τ_2 + … + β_{n−1} τ_n,   β_i = f_1 ⋯ f_i          (block mode)
                                             β_i = (1 + f_1 ⋯ f_i)/2  (item mode)

Item mode's cost is (Σ_k τ_k + T_block)/2: the sum of the τ's is the same in every order of the
same operations, so **both modes choose the same order** (``best_order``; a property test checks
it) — the engine's runs are blocks, and nothing is lost by computing the block cost.

Eq. 1–2 decide whether to keep the window w_rs of an intermediate result r ⋈ s that a third input
t joins: with w_rs, an item of t joins w_rs once; without it, an item of t joins w_s and then,
f_ts times, w_r (``keep_intermediate``).  Getta's τ_wait is the time an item of t waits for the
items of r and s being written into w_rs; in a serial engine (ours) nothing runs concurrently, so
that time is the writes themselves, shared out over t's items: (λ_r f_rs + λ_s f_sr) / λ_t writes
of w_rs per item of t, each costing τ_→ — the frequencies enter as eq. 2 says they do, and a t much
more frequent than r and s makes w_rs worth keeping (§3.1's conclusion).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from sluice.errors import SluiceError

# a join of three or more inputs keeps its intermediate results ("keep": a tree of binary joins),
# drops them ("drop": one dataflow join, Getta & Vossough §2.3) or lets eq. 1–2 decide ("auto")
JOIN_INTERMEDIATES = ("auto", "keep", "drop")
# other inputs up to which every order is costed (4! = 24, at every run of every changed input);
# beyond, the cheapest next step greedily
MAX_EXHAUSTIVE = 4


def check_join_intermediates(value: str) -> None:
    """The engine option ``join_intermediates`` (both backends): one of ``JOIN_INTERMEDIATES``."""
    if value not in JOIN_INTERMEDIATES:
        raise SluiceError(f"join_intermediates={value!r}: expected one of {', '.join(JOIN_INTERMEDIATES)}")


class Mode(Enum):
    """How the operations of one dataflow expression run (Getta & Vossough §3.1, after eq. 3)."""

    BLOCK = "block"  # an operation starts when its predecessor has finished (the engine's runs)
    ITEM = "item"  # an operation starts on each item as soon as its predecessor passes it on


def cost(taus: Sequence[float], fanouts: Sequence[float], mode: Mode = Mode.BLOCK) -> float:
    """Eq. 3: the time one input item spends in operations with per-item costs ``taus`` and
    fan-outs ``fanouts`` (the last operation's fan-out does not count), in this order.
    """
    if len(taus) != len(fanouts):
        raise ValueError("one fan-out per operation")
    total, product = 0.0, 1.0
    for k, (tau, f) in enumerate(zip(taus, fanouts, strict=True)):
        beta = 1.0 if k == 0 else (product if mode is Mode.BLOCK else (1.0 + product) / 2)
        total += beta * tau
        product *= f
    return total


@dataclass(frozen=True, slots=True)
class Step:
    """One operation of a dataflow expression as the order sees it: ``tau`` per item read,
    ``fanout`` items passed on per item read.
    """

    tau: float
    fanout: float


def best_order(
    others: Sequence[int],
    step: Callable[[frozenset[int], int], Step],
    first: int,
    mode: Mode = Mode.BLOCK,
) -> tuple[tuple[int, ...], float]:
    """The order of joining the inputs ``others`` after input ``first`` that minimises eq. 3, and
    its cost.  ``step(done, j)``: joining input ``j`` after the inputs ``done`` (its fan-out may
    depend on what is joined already: an input linked to none of them is a cross product).
    Every order is costed up to ``MAX_EXHAUSTIVE`` others; beyond, the cheapest next step greedily.
    Ties keep the written order.
    """
    if len(others) <= MAX_EXHAUSTIVE:
        best: tuple[tuple[int, ...], float] | None = None
        for perm in itertools.permutations(others):
            c = _order_cost(perm, step, first, mode)
            if best is None or c < best[1]:
                best = (perm, c)
        assert best is not None
        return best
    done, left, order = frozenset([first]), list(others), []
    while left:
        j = min(left, key=lambda x: step(done, x).fanout)
        order.append(j)
        left.remove(j)
        done = done | {j}
    return tuple(order), _order_cost(order, step, first, mode)


def _order_cost(order: Sequence[int], step: Callable[[frozenset[int], int], Step], first: int, mode: Mode) -> float:
    done = frozenset([first])
    taus, fans = [], []
    for j in order:
        s = step(done, j)
        taus.append(s.tau)
        fans.append(s.fanout)
        done = done | {j}
    return cost(taus, fans, mode)


@dataclass(frozen=True, slots=True)
class Intermediate:
    """What eq. 1–2 read to decide about the window w_rs of r ⋈ s, joined by a third input t.

    ``rates``: λ_r, λ_s, λ_t (items per unit of time, any unit); ``f_rs``, ``f_sr``: items of
    r ⋈ s an item of r (of s) makes; ``f_ts``: items an item of t makes joined with w_s (it is
    then joined with w_r, if w_rs is not kept); ``tau_join``: per item joined with a window;
    ``tau_write``: per item written to (and later expired from) w_rs.
    """

    rates: tuple[float, float, float]
    f_rs: float
    f_sr: float
    f_ts: float
    tau_join: float = 1.0
    tau_write: float = 1.0

    def wait(self) -> float:
        """τ_wait (eq. 2, serial): the writes of w_rs an item of t waits behind."""
        lr, ls, lt = self.rates
        writes = lr * self.f_rs + ls * self.f_sr
        if lt <= 0:  # t never arrives: w_rs is waited for by nothing — unless it never changes either
            return 0.0 if writes == 0 else float("inf")
        return writes / lt * self.tau_write

    def saving(self) -> float:
        """The right side of eq. 1: τ_⋈ws + f_ts τ_⋈wr − τ_⋈wrs."""
        return self.tau_join + self.f_ts * self.tau_join - self.tau_join


def keep_intermediate(x: Intermediate) -> bool:
    """Eq. 1: keep w_rs when the time t's items save by joining it exceeds the time spent keeping it."""
    return x.wait() < x.saving()
