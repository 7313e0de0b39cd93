"""What the planner decides for a shared window join (Hammad et al.; design 020): the policy and
variant it runs under (``EmbeddedEngine(shared_join=...)``), its spec, and each port's windows and
selections.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice import windows as W
from sluice.datatypes import DataType
from sluice.errors import SluiceError
from sluice.plan.expr import BExpr
from sluice.runtime.operators.base import OperatorSpec
from sluice.runtime.operators.join_buffer import Family

LEFT, RIGHT = 0, 1


class Policy(enum.Enum):
    """How the shared join orders its work (Hammad et al. §3)."""

    LWO = "lwo"
    SWF = "swf"
    GREEDY = "greedy"


class Variant(enum.Enum):
    """How an element finds its partners in a band (§3.4)."""

    HASH = "hash"
    NESTED_LOOP = "nested-loop"


@dataclass(frozen=True, slots=True)
class SharedJoinOptions:
    """``EmbeddedEngine(shared_join=...)``: the policy, and for experiments the variant (hash when
    the predicate has equality conjuncts, else nested loop) and the unit of scheduling.
    """

    policy: Policy = Policy.GREEDY
    variant: Variant | None = None  # None: hash when there are keys
    unit: int | None = None  # elements per unit of scheduling (None: what one read brings)

    @staticmethod
    def parse(text: str | SharedJoinOptions | None) -> SharedJoinOptions | None:
        """``"greedy"``, ``"swf:variant=nested-loop,unit=1"``, ``"off"`` (None)."""
        if text is None or isinstance(text, SharedJoinOptions):
            return text
        name, _, rest = text.strip().partition(":")
        name = name.strip().lower()
        if name == "off":
            if rest:
                raise SluiceError(f"shared join 'off' takes no options (got {rest!r})")
            return None
        names = [p.value for p in Policy]
        if name not in names:
            raise SluiceError(f"unknown shared-join policy {name!r}: expected one of {', '.join(names)} or off")
        variant: Variant | None = None
        unit: int | None = None
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, eq, value = item.partition("=")
            key, value = key.strip().lower(), value.strip().lower()
            if not eq:
                raise SluiceError(f"shared-join option {item!r}: expected key=value (variant=…, unit=…)")
            if key == "variant":
                kinds = [v.value for v in Variant]
                if value not in kinds:
                    raise SluiceError(f"shared-join variant {value!r}: expected {' or '.join(kinds)}")
                variant = Variant(value)
            elif key == "unit":
                if not value.isdigit() or int(value) < 1:
                    raise SluiceError(f"shared-join unit {value!r}: expected a positive whole number of elements")
                unit = int(value)
            else:
                raise SluiceError(f"unknown shared-join option {key!r} (variant, unit)")
        return SharedJoinOptions(Policy(name), variant, unit)

    def describe(self) -> str:
        bits = [self.policy.value]
        if self.variant is not None:
            bits.append(f"variant={self.variant.value}")
        if self.unit is not None:
            bits.append(f"unit={self.unit}")
        return bits[0] + (":" + ",".join(bits[1:]) if len(bits) > 1 else "")


@dataclass(frozen=True, slots=True)
class SideView:
    """What one query sees of one input: its window, and the selections it applies to that
    input's elements alone (None: all).
    """

    window: W.WindowDef
    filter: BExpr | None = None
    filter_text: str = ""

    def describe(self) -> str:
        s = f"[{self.window.describe()}]"
        return s + (f" where {self.filter_text}" if self.filter_text else "")


@dataclass(frozen=True, slots=True)
class PortDef:
    """One output of the shared join: the windows (and selections) of the queries it serves."""

    left: SideView
    right: SideView
    since: int | None = None  # a query registered while running: its first instant

    def side(self, s: int) -> SideView:
        return self.left if s == LEFT else self.right


@dataclass(frozen=True, slots=True)
class SharedWindowJoinSpec(OperatorSpec):
    left_types: tuple[DataType, ...]
    right_types: tuple[DataType, ...]
    keys: tuple[tuple[int, int], ...]  # (left column, right column) pairs that must be equal
    residual: BExpr | None  # the rest of the (common) join predicate, over the joined row
    families: tuple[Family, Family]  # per input, the family of every port's window on it
    options: SharedJoinOptions = field(default_factory=SharedJoinOptions)

    @property
    def variant(self) -> Variant:
        return variant_for(self.keys, self.options)


def variant_for(keys: Sequence[Any], options: SharedJoinOptions) -> Variant:
    """The variant asked for, else hashing on the equality conjuncts if there are any."""
    if options.variant is not None:
        return options.variant
    return Variant.HASH if keys else Variant.NESTED_LOOP


def shared_join_options(text: str | SharedJoinOptions | None, sharing: bool) -> SharedJoinOptions | None:
    """The shared-join policy an engine option asks for: Greedy unless turned off; none without
    sharing (asking for one then is an error, not a silent fallback).  Both backends read it.
    """
    if text is None:
        return SharedJoinOptions() if sharing else None
    opts = SharedJoinOptions.parse(text)
    if opts is not None and not sharing:
        raise SluiceError(f"shared_join={opts.describe()!r} needs sharing=True (with sharing=False use 'off')")
    return opts
