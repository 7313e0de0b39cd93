"""A 1-D NumPy array grown at the end and cut at the front, each in amortised O(1) per element —
what a window's buffer needs (``np.concatenate`` per batch copies the whole window every time).

>>> t = Tail(np.int64)
>>> t.extend(np.arange(5)); t.drop(2); t.extend(np.array([9]))
>>> t.view.tolist()
[2, 3, 4, 9]
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Tail:
    __slots__ = ("_data", "_lo", "_hi")

    def __init__(self, dtype: Any, values: np.ndarray | None = None) -> None:
        v = np.empty(0, dtype) if values is None else np.asarray(values, dtype)
        self._data = np.empty(max(16, 2 * len(v)), dtype)
        self._data[: len(v)] = v
        self._lo, self._hi = 0, len(v)

    @property
    def view(self) -> np.ndarray:
        """Its elements (no copy: writes to it change them)."""
        return self._data[self._lo : self._hi]

    def __len__(self) -> int:
        return self._hi - self._lo

    def extend(self, values: np.ndarray) -> None:
        n = len(values)
        if self._hi + n > len(self._data):
            live = self._hi - self._lo
            data = self._data
            if live + n > len(data) // 2:  # grow (else: the front has room enough to move down)
                data = np.empty(2 * (live + n), self._data.dtype)
            data[:live] = self._data[self._lo : self._hi]
            self._data, self._lo, self._hi = data, 0, live
        self._data[self._hi : self._hi + n] = values
        self._hi += n

    def drop(self, k: int) -> None:
        """Forget the first ``k`` elements."""
        self._lo = min(self._hi, self._lo + max(k, 0))

    def __getstate__(self) -> dict[str, Any]:  # a pickle holds its elements, not its spare room
        return {"dtype": self._data.dtype, "values": self.view.copy()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        Tail.__init__(self, state["dtype"], state["values"])
