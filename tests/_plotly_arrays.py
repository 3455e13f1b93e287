"""Trace arrays of a plotly figure spec as tests read them.

plotly sends NumPy arrays (and `components.live_chart` long numeric lists) as typed arrays:
`{"dtype": "i1" | "i2" | "i4" | "f8" ..., "bdata": base64 of little-endian bytes[, "shape":
"rows, cols"]}`; short lists stay JSON lists.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np


def decoded(values: Any) -> np.ndarray:
    """`values` (a typed-array spec or a JSON list) as a NumPy array."""
    if not isinstance(values, dict):
        return np.asarray(values)
    array = np.frombuffer(base64.b64decode(values["bdata"]), dtype="<" + values["dtype"])
    if "shape" in values:
        array = array.reshape([int(n) for n in values["shape"].split(",")])
    return array
