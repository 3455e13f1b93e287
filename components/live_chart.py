"""A plotly chart that is drawn once and then patched in place: the Train page's live charts.

Why not `st.plotly_chart`: Streamlit 1.67 computes a plotly chart's element id from its figure
spec even when it has a `key`, so every refresh with new data is a NEW element, which the
browser unmounts and mounts again: blank frames while it redraws, and a tab watching a run grew
0.75 -> 2.07 GiB in 10 minutes with plain charts. This element is a Streamlit components-v2 element
whose identity is its key alone (`key_as_main_identity`): new data reaches the SAME element,
whose script creates the plot `div` once and then calls `Plotly.react` on it, which patches the
drawn SVG in place (and keeps the user's zoom through `uirevision`).

plotly.js comes from the `plotly` Python package's own bundle (`plotly/package_data/
plotly.min.js`), served by Streamlit's component file route (a v1 component path declared
here, nothing rendered from it) and cached by the browser: no CDN, no network. The chart is
mounted in the page's DOM (not a shadow root) so plotly's global styles (modebar, hover) apply.
Colours follow the page: text colour and font from the element's computed style, a transparent
background, Streamlit's own colourway for traces that name no colour.

A refresh sends what is new (`chart_payload`): the first drawing of a key carries the whole
figure; later ones a patch on the revision the element drew (points kept and points appended
per trace array, the layout when it changed). The element keeps the figure it drew per key in
the page (`window.__labLiveCharts`), so a chart mounted again (its view chosen again) redraws
from there; one that holds no figure to patch keeps its drawing and asks for the whole figure
(its `resync` trigger reruns the fragment). Measured with the builders of `components.figures`
(loss, accuracy and hyperparameter trace of a run at step 1,990, 15 steps per refresh): 39,375
bytes of payload per refresh sent whole, 1,150 as patches.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import plotly
import plotly.graph_objects as go
import streamlit as st
import streamlit.components.v1 as components_v1

# The folder holding plotly.min.js, served at /component/<this module>.plotly_js/plotly.min.js.
_BUNDLE_DIR = Path(plotly.__file__).resolve().parent / "package_data"
components_v1.declare_component("plotly_js", path=str(_BUNDLE_DIR))
BUNDLE_ROUTE = f"component/{__name__}.plotly_js/plotly.min.js"

MIN_HEIGHT, MAX_HEIGHT = 80, 2000  # px
# Numeric trace arrays of at least this many values are sent as plotly.js typed arrays
# (`{"dtype", "bdata"[, "shape"]}`, base64 of little-endian bytes: 5.3 characters per int32 and
# 10.7 per float64 against ~7 and ~19 for their JSON text), the encoding plotly.py itself uses
# for NumPy arrays (the live figures pass NumPy arrays: plotly packs those itself and skips its
# per-element validation, 49 -> 18 ms for the Loss figure of 2 x 2,000 points; lists, e.g. of
# the Runs page's figures, are packed here). A whole figure carries every point (2,000 per
# series), and a tab that parses less text leaves the browser less garbage to collect
# (bench/bench_long_run.py).
PACK_FROM = 32
_PACKED_KEYS = ("x", "y", "z", "customdata")
_INT32 = np.iinfo(np.int32)

_JS = """
const ROUTE = "%(route)s";
const COLORWAY = ["#0068c9", "#83c9ff", "#ff2b2b", "#ffabab", "#29b09d", "#7defa1",
                  "#ff8700", "#ffd16a", "#6d3fc0", "#d5dae5"];

function loadPlotly() {
  if (!window.__labPlotly) {
    window.__labPlotly = new Promise((resolve, reject) => {
      if (window.Plotly) { resolve(window.Plotly); return; }
      const script = document.createElement("script");
      script.src = new URL(ROUTE, document.baseURI).href;
      script.onload = () => resolve(window.Plotly);
      script.onerror = () => { window.__labPlotly = null; reject(new Error("plotly.js did not load")); };
      document.head.appendChild(script);
    });
  }
  return window.__labPlotly;
}

function themed(layout, element) {
  const style = getComputedStyle(element);
  const text = style.color || "#31333f";
  const grid = text.replace("rgb(", "rgba(").replace(")", ", 0.12)");
  const axis = (a) => Object.assign({gridcolor: grid, zerolinecolor: grid, linecolor: grid,
                                     automargin: true}, a || {});
  const out = Object.assign({}, layout);
  out.paper_bgcolor = layout.paper_bgcolor || "rgba(0,0,0,0)";
  out.plot_bgcolor = layout.plot_bgcolor || "rgba(0,0,0,0)";
  out.font = Object.assign({color: text, family: style.fontFamily, size: 12}, layout.font || {});
  out.colorway = layout.colorway || COLORWAY;
  for (const key of Object.keys(out)) {
    if (/^[xy]axis[0-9]*$/.test(key)) out[key] = axis(out[key]);
  }
  if (!out.xaxis) out.xaxis = axis({});
  if (!out.yaxis) out.yaxis = axis({});
  return out;
}

// The figure each chart drew last, by key: a patch (`data.patch`) names the revision it
// extends (`data.base`); a chart mounted again (its tab shown again) redraws from here.
const DRAWN = (window.__labLiveCharts = window.__labLiveCharts || new Map());
const EXTENDED = ["x", "y", "customdata", "text"];
const TYPED = {i1: Int8Array, u1: Uint8Array, u1c: Uint8ClampedArray, i2: Int16Array,
               u2: Uint16Array, i4: Int32Array, u4: Uint32Array, f4: Float32Array,
               f8: Float64Array};

function plain(value) {  // a 1-D typed-array spec -> a JS array (2-D ones stay for plotly)
  if (!value || typeof value !== "object" || Array.isArray(value) || value.bdata === undefined
      || value.shape !== undefined) return value;
  const text = atob(value.bdata);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  const Typed = TYPED[value.dtype];
  return Typed ? Array.from(new Typed(bytes.buffer)) : value;
}

function plainTraces(traces) {
  return (traces || []).map((trace) => {
    const out = Object.assign({}, trace);
    for (const key of EXTENDED) if (key in out) out[key] = plain(out[key]);
    return out;
  });
}

function patched(previous, patch) {  // previous figure + {layout, traces: [{keep, tail}]}
  const data = previous.data.map((trace, i) => {
    const change = patch.traces[i];
    if (!change) return trace;
    const out = Object.assign({}, trace);
    for (const key of Object.keys(change.keep)) {
      out[key] = (trace[key] || []).slice(0, change.keep[key]).concat(plain(change.tail[key]));
    }
    return out;
  });
  return {data: data, layout: patch.layout || previous.layout};
}

export default function (component) {
  const { data, parentElement } = component;
  let div = parentElement.querySelector("div.lab-live-chart");
  if (!div) {
    div = document.createElement("div");
    div.className = "lab-live-chart";
    div.style.width = "100%%";
    parentElement.appendChild(div);
  }
  div.style.height = data.height + "px";
  div.dataset.revision = data.revision;
  let figure;
  if (data.patch !== undefined) {
    const previous = DRAWN.get(data.key);
    if (!previous || previous.revision !== data.base) {
      // a patch on a figure this page does not hold: keep what is drawn, ask for all of it
      component.setTriggerValue("resync", data.revision);
      return;
    }
    figure = patched(previous, JSON.parse(data.patch));
  } else {
    const parsed = JSON.parse(data.figure);
    figure = {data: plainTraces(parsed.data), layout: parsed.layout || {}};
  }
  DRAWN.set(data.key, {revision: data.revision, data: figure.data, layout: figure.layout});
  loadPlotly().then((Plotly) => {
    const layout = themed(figure.layout, parentElement);
    layout.height = data.height;
    Plotly.react(div, figure.data, layout, {displaylogo: false, responsive: true});
    div.dataset.drawn = data.revision;
  }).catch((error) => { div.textContent = String(error); });
  return () => { if (window.Plotly) window.Plotly.purge(div); };
}
""" % {"route": BUNDLE_ROUTE}

_live_chart = st.components.v2.component("optimizer_lab_live_chart", js=_JS,
                                         isolate_styles=False)


def figure_payload(fig: go.Figure | dict[str, Any], height: int, revision: int = 0
                   ) -> dict[str, Any]:
    """The element's data: the figure as plotly JSON (its `template` left out: the element
    applies the page's theme, and a template is ~8 KB sent on every refresh; long numeric
    arrays as typed arrays, see `PACK_FROM`), its height and a revision counter (shown in the
    DOM as `data-revision` / `data-drawn`, for tests).

    Args:
        fig: a plotly Figure or a figure dict (`{"data": [...], "layout": {...}}`).
        height: chart height in pixels, `MIN_HEIGHT`..`MAX_HEIGHT`.
        revision: any int; the element marks the revision it has drawn.

    Raises:
        ValueError: `height` outside the allowed range (the message names it).
    """
    if isinstance(height, bool) or not isinstance(height, int) or not (
            MIN_HEIGHT <= height <= MAX_HEIGHT):
        raise ValueError(f"height={height!r} refused: must be an int in "
                         f"[{MIN_HEIGHT}, {MAX_HEIGHT}] (pixels)")
    if isinstance(fig, go.Figure):
        fig = fig.to_plotly_json()  # dicts: no second validation (the builders validated)
    layout = {k: v for k, v in fig.get("layout", {}).items() if k != "template"}
    data = [{k: _typed_array(v) if k in _PACKED_KEYS else v for k, v in trace.items()}
            for trace in fig.get("data", [])]
    text = plotly.io.to_json({"data": data, "layout": layout}, validate=False)
    return {"figure": text, "height": height, "revision": int(revision)}


def _typed_array(values: Any) -> Any:
    """`values` as a plotly.js typed-array spec when it is a list or NumPy array of at least
    `PACK_FROM` numbers (1-D) or of equal-length number lists (2-D, a heatmap's `z`): int32
    when every value is an integer that fits, else float64 (exact: what Python floats are).
    Anything else (text, None gaps, booleans, a typed array already) is returned unchanged."""
    if not isinstance(values, (list, tuple, np.ndarray)) or len(values) < PACK_FROM:
        return values
    try:
        array = np.asarray(values)
    except ValueError:  # ragged rows
        return values
    if array.ndim not in (1, 2) or array.size == 0:
        return values
    if array.dtype.kind in "iu" and _INT32.min <= array.min() and array.max() <= _INT32.max:
        array, code = array.astype("<i4"), "i4"
    elif array.dtype.kind in "iuf":
        array, code = array.astype("<f8"), "f8"
    else:  # object (None), bool, text
        return values
    spec = {"dtype": code, "bdata": base64.b64encode(array.tobytes()).decode("ascii")}
    if array.ndim == 2:
        spec["shape"] = f"{array.shape[0]}, {array.shape[1]}"
    return spec


# Trace keys whose 1-D arrays are sent as a tail when they only grew (or changed at the end).
EXTENDED_KEYS = ("x", "y", "customdata", "text")
_SENT_KEY = "_live_chart_sent"  # session state: chart key -> _Sent


@dataclass
class _Sent:
    """What a chart element last received: its revision, the layout (JSON text), each
    trace's other keys (JSON text) and its `EXTENDED_KEYS` arrays."""

    revision: int
    layout: str
    props: list[str]
    arrays: list[dict[str, np.ndarray]]


def _split(trace: dict[str, Any]) -> tuple[str, dict[str, np.ndarray]]:
    """A trace's other keys as JSON text, and its 1-D `EXTENDED_KEYS` arrays (lists, NumPy
    arrays, or the typed-array specs `Figure.to_plotly_json` makes of NumPy arrays)."""
    arrays = {}
    for key in EXTENDED_KEYS:
        value = trace.get(key)
        if isinstance(value, dict) and "bdata" in value and "shape" not in value:
            try:
                arrays[key] = np.frombuffer(base64.b64decode(value["bdata"]),
                                            dtype="<" + str(value["dtype"]))
            except (TypeError, ValueError):  # a dtype NumPy does not name: sent whole
                pass
        elif isinstance(value, (list, tuple, np.ndarray)):
            array = np.asarray(value) if not isinstance(value, np.ndarray) else value
            if array.ndim == 1:
                arrays[key] = array
    rest = {k: v for k, v in trace.items() if k not in arrays}
    return plotly.io.to_json(rest, validate=False), arrays


def _common_prefix(old: np.ndarray, new: np.ndarray) -> int:
    n = min(len(old), len(new))
    if n == 0 or old.dtype.kind != new.dtype.kind:
        return 0
    same = old[:n] == new[:n]
    if old.dtype.kind == "f":
        same |= np.isnan(old[:n]) & np.isnan(new[:n])
    differ = np.flatnonzero(~same)
    return int(differ[0]) if differ.size else n


def chart_payload(fig: go.Figure | dict[str, Any], key: str, height: int, revision: int,
                  previous: _Sent | None) -> tuple[dict[str, Any], _Sent]:
    """The element's data for this refresh, and what it then holds.

    A full figure (`figure_payload`) when the element holds nothing yet (`previous` None), when
    the traces changed in number or in anything but their `EXTENDED_KEYS` arrays, or when the
    patch would not be smaller. Otherwise a patch: `{"key", "height", "revision", "base":
    previous revision, "patch": JSON of {"layout": the layout or null when unchanged,
    "traces": [{"keep": {array key: values kept}, "tail": {array key: values appended}} or
    null]}}`. A live curve grows at its end, so a refresh sends its new points only (and a
    hyper trace's moved last point) instead of every point again.

    Raises:
        ValueError: a refused `height` (`figure_payload`).
    """
    spec = fig.to_plotly_json() if isinstance(fig, go.Figure) else fig

    def full() -> dict[str, Any]:
        return {"key": key, **figure_payload(spec, height, revision)}

    layout = plotly.io.to_json({k: v for k, v in spec.get("layout", {}).items()
                                if k != "template"}, validate=False)
    split = [_split(trace) for trace in spec.get("data", [])]
    sent = _Sent(revision, layout, [p for p, _ in split], [a for _, a in split])
    if (previous is None or previous.props != sent.props
            or any(a.keys() != b.keys() for a, b in zip(previous.arrays, sent.arrays))):
        return full(), sent
    traces: list[dict[str, Any] | None] = []
    sent_values = all_values = 0
    for old, new in zip(previous.arrays, sent.arrays):
        keep = {k: _common_prefix(old[k], new[k]) for k in new}
        all_values += sum(len(v) for v in new.values())
        if all(keep[k] == len(new[k]) == len(old[k]) for k in new):
            traces.append(None)
            continue
        sent_values += sum(len(new[k]) - keep[k] for k in new)
        traces.append({"keep": keep, "tail": {k: _typed_array(new[k][keep[k]:].tolist())
                                              for k in new}})
    if 2 * sent_values > all_values:  # most points are new (a re-thinned curve): all of it
        return full(), sent
    patch = plotly.io.to_json({"layout": None if layout == previous.layout
                               else json.loads(layout), "traces": traces}, validate=False)
    return {"key": key, "patch": patch, "base": previous.revision, "height": height,
            "revision": revision}, sent


def _resync(key: str) -> None:
    """The browser holds no figure to patch (`setTriggerValue("resync")`): send all of it."""
    st.session_state.get(_SENT_KEY, {}).pop(key, None)


def live_chart(fig: go.Figure | dict[str, Any], key: str, height: int = 340) -> None:
    """Draw `fig` in the element named `key`, patching the one already drawn there: only the
    points added since the previous refresh travel (`chart_payload`).

    Args:
        fig: as `figure_payload`.
        key: the element's whole identity: the same key on the next refresh updates the same
            chart in place.
        height: pixels, as `figure_payload`.

    Raises:
        ValueError: a refused `height`.
    """
    revisions = st.session_state.setdefault("_live_chart_revisions", {})
    revisions[key] = revisions.get(key, 0) + 1
    sent = st.session_state.setdefault(_SENT_KEY, {})
    payload, drawn = chart_payload(fig, key, height, revisions[key], sent.get(key))
    _live_chart(key=key, data=payload, height=height, on_resync_change=lambda: _resync(key))
    sent[key] = drawn  # only once it is on its way (a rerun may stop this one before)
