"""What a user states about resources: the engine's memory limit and each query's weight and
tolerable imprecision (STREAM §2.4 weights, §5.2 "users specify tolerable imprecision").

>>> parse_size("64MB"), parse_size("1.5 KiB"), parse_size(4096)
(64000000, 1536, 4096)
>>> QueryLimits(weight=2.0, min_precision=0.9).describe()
'weight 2, min precision 0.9'
>>> parse_latency("200ms"), parse_latency("1.5 seconds"), parse_latency(0.25)
(0.2, 1.5, 0.25)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sluice.errors import SluiceError
from sluice.scheduling.strategies import SIZE_UNITS


def parse_size(value: int | float | str, what: str = "memory_limit") -> int:
    """Bytes from ``4096``, ``"64MB"``, ``"1.5GiB"`` (KB/MB/GB are powers of 10, KiB/MiB/GiB of 2)."""
    if isinstance(value, bool):
        raise SluiceError(f"{what} must be a size such as 64MB, not {value!r}")
    if isinstance(value, int | float):
        n = value
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if not m or m.group(2).upper() not in SIZE_UNITS:
            raise SluiceError(
                f"{what}={value!r}: expected a number optionally with B, KB, MB, GB, KiB, MiB or GiB (e.g. 64MB)"
            )
        n = float(m.group(1)) * SIZE_UNITS[m.group(2).upper()]
    if not math.isfinite(n) or n < 1:
        raise SluiceError(f"{what} must be a positive size of at least 1 byte (e.g. 64MB), not {value!r}")
    return int(n)


def parse_latency(value: int | float | str, what: str = "max_latency") -> float:
    """Seconds from ``0.2``, ``"200ms"``, ``"1.5 seconds"``, ``"1 minute"``."""
    from sluice.cql.ast import TimeUnit

    if isinstance(value, bool):
        raise SluiceError(f"{what} must be a duration such as 200ms, not {value!r}")
    if isinstance(value, int | float):
        secs = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        try:
            if not m:
                raise ValueError(value)
            unit = TimeUnit.of(m.group(2) or "second")
        except (ValueError, KeyError):
            raise SluiceError(
                f"{what}={value!r}: expected a duration, a number with ms, s, second(s), minute(s)… (e.g. 200ms)"
            ) from None
        secs = float(m.group(1)) * unit.millis / 1000
    if not math.isfinite(secs) or secs <= 0:
        raise SluiceError(f"{what} must be a positive duration (e.g. 200ms), not {value!r}")
    return secs


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """A query's stated importance and tolerance (``register_query(weight=…, min_precision=…)``).

    ``weight``: relative importance when the engine must approximate (STREAM §2.4: more weight,
    more precision).  ``min_precision``: the least recall (1 − FN, ``sluice.approx.precision``) the
    query accepts; 1.0 means exact only — the engine never approximates it, and reports when the
    memory limit cannot be held because of it.  ``max_latency``: seconds from an input's push to
    the output it causes that the query tolerates (Jiang's QoS; ``sluice.approx.qos``).
    """

    weight: float = 1.0
    min_precision: float = 0.0
    max_latency: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.weight, int | float) and math.isfinite(self.weight) and self.weight >= 0):
            raise SluiceError(f"weight must be a finite number ≥ 0, not {self.weight!r}")
        if not (isinstance(self.min_precision, int | float) and 0.0 <= self.min_precision <= 1.0):
            raise SluiceError(f"min_precision must be between 0 and 1 (1: exact only), not {self.min_precision!r}")
        if self.max_latency is not None and not (math.isfinite(self.max_latency) and self.max_latency > 0):
            raise SluiceError(f"max_latency must be a positive number of seconds, not {self.max_latency!r}")

    @property
    def exact_only(self) -> bool:
        return self.min_precision >= 1.0

    def describe(self) -> str:
        out = f"weight {self.weight:g}, min precision {self.min_precision:g}"
        return out if self.max_latency is None else out + f", max latency {self.max_latency * 1000:g} ms"
