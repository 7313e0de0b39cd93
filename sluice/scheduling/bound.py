"""Lower bounds on the queue memory any schedule needs (for the theorems and the experiments).

``lp_bound`` — a fluid LP over unit time slots, solved with HiGHS (scipy): x[p,i,k] = time given
to operator i of path p in slot k, q[p,i,k] = input-tuple units waiting at it after slot k:

    Σ_{p,i} x[p,i,k] ≤ 1
    q[p,1,k] = q[p,1,k−1] + a[p,k] − x[p,1,k]/c[p,1]
    q[p,i,k] = q[p,i,k−1] + x[p,i−1,k]/c[p,i−1] − x[p,i,k]/c[p,i]
    bound(T) = min Σ_{p,i} z[p,i]·q[p,i,T]   with z[p,i] = S_{i−1} = s_1…s_{i−1}

where c[p,i] = T_i − T_{i−1} is the time operator i needs for what one input tuple has become
(Chain §3's progress chart), so q counts input tuples and z turns them into memory.  (The issue
writes the recurrence with per-real-tuple times; counted in input-tuple units, as here, the
weights z are the ones that make memory right.)  Memory is measured at slot starts, after that
slot's arrivals, like the simulator: bound at T is q after slot T−1 plus a[T].

``envelope_bound`` — Chain run on the lower envelopes (Chain Thm 1 + Prop 2): also a lower bound,
and far cheaper.

>>> from sluice.scheduling.model import Op, Path
>>> p = Path("p", (Op("o1", 1.0, 0.2), Op("o2", 5.0, 1.0)))
>>> [round(b, 3) for b in lp_bounds([p], {"p": [0, 1, 1, 1]}, 4)]
[0.0, 1.0, 1.2, 1.4]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import lil_matrix

from sluice.scheduling.model import Path, envelope_path
from sluice.scheduling.simulator import simulate


def lp_bound(paths: Sequence[Path], arrivals: Mapping[str, Sequence[float]], T: int) -> float:
    """The least total queue memory any schedule can have at time T."""
    if T <= 0:
        return sum(p.sizes()[0] * (arrivals.get(p.name, [0])[0] if arrivals.get(p.name) else 0) for p in paths)
    ops = [(pi, i) for pi, p in enumerate(paths) for i in range(len(p.ops))]
    n, K = len(ops), T  # slots 0..T-1
    nx = n * K
    nv = 2 * nx  # x then q
    col = {op: j for j, op in enumerate(ops)}
    costs = [p.unit_costs() for p in paths]
    sizes = [p.sizes() for p in paths]

    def xv(j: int, k: int) -> int:
        return k * n + j

    def qv(j: int, k: int) -> int:
        return nx + k * n + j

    a_ub = lil_matrix((K, nv))
    for k in range(K):
        for j in range(n):
            a_ub[k, xv(j, k)] = 1.0
    b_ub = np.ones(K)
    a_eq = lil_matrix((nx, nv))
    b_eq = np.zeros(nx)
    r = 0
    for k in range(K):
        for (pi, i), j in col.items():
            # q[j,k] − q[j,k−1] + x[j,k]/c[j] − x[j−1,k]/c[j−1] = a (first op) or 0
            a_eq[r, qv(j, k)] = 1.0
            if k > 0:
                a_eq[r, qv(j, k - 1)] = -1.0
            a_eq[r, xv(j, k)] = 1.0 / costs[pi][i]
            if i > 0:
                a_eq[r, xv(col[(pi, i - 1)], k)] = -1.0 / costs[pi][i - 1]
                b_eq[r] = 0.0
            else:
                arr = arrivals.get(paths[pi].name, ())
                b_eq[r] = float(arr[k]) if k < len(arr) else 0.0
            r += 1
    c = np.zeros(nv)
    for (pi, i), j in col.items():
        c[qv(j, K - 1)] = sizes[pi][i]
    res = linprog(c, A_ub=a_ub.tocsr(), b_ub=b_ub, A_eq=a_eq.tocsr(), b_eq=b_eq, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"LP failed: {res.message}")
    extra = sum(float(arrivals.get(p.name, ())[T]) if T < len(arrivals.get(p.name, ())) else 0.0 for p in paths)
    return float(res.fun) + extra


def lp_bounds(paths: Sequence[Path], arrivals: Mapping[str, Sequence[float]], horizon: int) -> list[float]:
    return [lp_bound(paths, arrivals, T) for T in range(horizon)]


def envelope_bound(paths: Sequence[Path], arrivals: Mapping[str, Sequence[float]], horizon: int) -> list[float]:
    """Memory of Chain on the lower-envelope simulations P' — a lower bound for every schedule."""
    from sluice.scheduling.strategies import make

    env = [envelope_path(p) for p in paths]
    renamed = {e.name: arrivals.get(p.name, ()) for p, e in zip(paths, env, strict=True)}
    return simulate(env, renamed, make("chain"), horizon).memory
