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


EXTENDED = ("x", "y", "customdata", "text")


def _plain(values: Any) -> Any:
    if isinstance(values, dict) and "bdata" in values and "shape" not in values:
        return decoded(values).tolist()
    return values


def drawn_figure(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """The figure a live chart element shows after receiving `payloads` in order: a full
    `figure`, then patches (`keep` values of each array, `tail` appended; a new `layout` or
    null), as the element's script applies them (`components.live_chart`)."""
    import json

    figure: dict[str, Any] = {}
    revision = None
    for payload in payloads:
        if "patch" not in payload:
            parsed = json.loads(payload["figure"])
            figure = {"data": [{k: _plain(v) if k in EXTENDED else v for k, v in t.items()}
                               for t in parsed.get("data", [])],
                      "layout": parsed.get("layout", {})}
        else:
            assert payload["base"] == revision, (payload["base"], revision)
            patch = json.loads(payload["patch"])
            for trace, change in zip(figure["data"], patch["traces"]):
                if change:
                    for key, keep in change["keep"].items():
                        trace[key] = list(trace.get(key, []))[:keep] + list(
                            _plain(change["tail"][key]))
            if patch["layout"] is not None:
                figure["layout"] = patch["layout"]
        revision = payload["revision"]
    return figure
