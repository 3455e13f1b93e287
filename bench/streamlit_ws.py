"""A Streamlit session without a browser: Streamlit's own websocket protocol, spoken as its
frontend speaks it, for load benchmarks of many sessions (bench/bench_class.py).

The frontend (Streamlit 1.67, `static/js/index.*.js`) does, and so does `BrowserlessSession`:

* opens `ws://host/_stcore/stream` with the subprotocol `streamlit`, then sends one `BackMsg`
  `rerun_script` (`ClientState`: query string, page name = the URL path below the base URL,
  empty page hash, the widget states it holds, the hashes of the cached messages, the context);
* keeps the `page_script_hash` of each `new_session` for its later reruns;
* on `auto_rerun {interval, fragment_id}` starts a timer (`setInterval`) that sends a
  `rerun_script` with that `fragment_id` and `is_auto_rerun` every `interval` seconds, whether
  or not the previous run finished; the same interval again keeps the timer; `stop_auto_rerun`
  and every full-app `new_session` (no fragment ids in its metadata) clear timers;
* keeps every message whose `metadata.cacheable` is set under its `hash`, sends those hashes in
  `cached_message_hashes`, and resolves `ref_hash` messages from that cache;
* sends a button press as a one-shot `trigger_value` and a number input as a `double_value`
  kept for every later rerun (a browser keeps every widget's value; a value that is not sent
  is the one the server already holds, so the two are equivalent for these pages).

Not a test: a tool of the benchmarks. Parsing is pure (`parse_forward`) and unit-tested in
tests/test_streamlit_ws.py.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

# Widget elements whose `label` and `id` the session remembers (proto field names of Element).
WIDGET_TYPES = ("button", "number_input", "selectbox", "checkbox", "slider", "text_input",
                "button_group", "segmented_control", "multiselect")
_TAGS = re.compile(r"<[^>]+>|\*\*")


@dataclass
class Parsed:
    """What one ForwardMsg tells a session.

    Fields:
        kind: the `ForwardMsg.type` oneof name (`delta`, `new_session`, `script_finished`, ...).
        nbytes: size of the frame on the wire, bytes.
        widgets: (element type, label, widget id) of a widget element in a delta.
        text: markdown / text of a text element (empty otherwise).
        fragment_ids: the fragments the run reruns (metadata; empty for a full-app run).
        auto_rerun: (fragment id, interval in seconds) of an `auto_rerun`.
        stop_fragments: fragment ids of a `stop_auto_rerun`.
        finished: the script-finished status name, or "".
        cache_hash: the message's hash when it is cacheable, else "".
        ref_hash: the hash an `ref_hash` message points to, else "".
        page_hash: the page script hash a `navigation` message names, else "".
    """

    kind: str
    nbytes: int
    widgets: list[tuple[str, str, str]] = field(default_factory=list)
    text: str = ""
    fragment_ids: tuple[str, ...] = ()
    auto_rerun: tuple[str, float] | None = None
    stop_fragments: tuple[str, ...] = ()
    finished: str = ""
    cache_hash: str = ""
    ref_hash: str = ""
    page_hash: str = ""


def parse_forward(frame: bytes) -> Parsed:
    """Decode one binary websocket frame of the server into `Parsed`.

    Raises:
        google.protobuf.message.DecodeError: the frame is not a ForwardMsg.
    """
    msg = ForwardMsg()
    msg.ParseFromString(frame)
    kind = msg.WhichOneof("type") or ""
    out = Parsed(kind=kind, nbytes=len(frame),
                 fragment_ids=tuple(msg.metadata.run.fragment_ids))
    if msg.metadata.cacheable and msg.hash:
        out.cache_hash = msg.hash
    if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
        element = msg.delta.new_element
        etype = element.WhichOneof("type") or ""
        if etype in WIDGET_TYPES:
            widget = getattr(element, etype)
            out.widgets.append((etype, getattr(widget, "label", ""), getattr(widget, "id", "")))
        elif etype == "markdown":
            out.text = element.markdown.body
        elif etype in ("text", "alert"):
            out.text = getattr(element, etype).body
    elif kind == "navigation":  # st.navigation names the page it ran
        out.page_hash = msg.navigation.page_script_hash
    elif kind == "auto_rerun":
        out.auto_rerun = (msg.auto_rerun.fragment_id, float(msg.auto_rerun.interval))
    elif kind == "stop_auto_rerun":
        out.stop_fragments = tuple(msg.stop_auto_rerun.fragment_ids)
    elif kind == "script_finished":
        out.finished = ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished)
    elif kind == "ref_hash":
        out.ref_hash = msg.ref_hash
    return out


def rerun_message(query_string: str, page_name: str, page_hash: str,
                  widgets: dict[str, WidgetState], cached: list[str],
                  fragment_id: str = "", auto: bool = False) -> bytes:
    """One `BackMsg.rerun_script`, as the frontend's `sendRerunBackMsg` builds it."""
    back = BackMsg()
    state = back.rerun_script
    state.query_string = query_string
    state.page_name = page_name if not page_hash else ""
    state.page_script_hash = page_hash
    state.widget_states.widgets.extend(widgets.values())
    state.fragment_id = fragment_id
    state.is_auto_rerun = auto
    state.cached_message_hashes.extend(cached)
    state.context_info.timezone = "UTC"
    state.context_info.timezone_offset = 0
    state.context_info.locale = "en-US"
    state.context_info.is_embedded = False
    state.context_info.color_scheme = "light"
    return back.SerializeToString()


@dataclass
class Rerun:
    """One rerun request and what came back for it.

    Fields: sent / done in `time.monotonic()` seconds (done None until `script_finished`),
    fragment (the fragment id, "" = full app), nbytes received for it.
    """

    sent: float
    fragment: str
    done: float | None = None
    nbytes: int = 0


class BrowserlessSession:
    """One Streamlit session over the websocket, rerunning as a browser does.

    Args:
        url: the entry URL, e.g. `http://127.0.0.1:8501/train?optimizer=adam`.
        cookies: cookies the browser sends with the websocket request (name -> value).

    Attributes after `run`: `reruns` (every rerun sent, with latency), `finished` (time,
    status, fragment ids of every run that finished), `run_bytes` (whether a finished run was
    a fragment run, and the bytes from its `new_session` to its `script_finished`), `bytes_in`,
    `texts` (latest markdown/text bodies of the last full run, in order), `widgets` (label ->
    (type, id)), `seen` (callbacks `watch` registered for byte patterns).
    """

    def __init__(self, url: str, cookies: dict[str, str] | None = None):
        parts = urlsplit(url)
        self.headers = ({"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
                        if cookies else {})
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.ws_url = f"ws://{parts.netloc}/_stcore/stream"
        self.page_name = parts.path.strip("/")
        self.query = parts.query
        self.page_hash = ""
        self.widget_states: dict[str, WidgetState] = {}
        self.cache: dict[str, None] = {}
        self.widgets: dict[str, tuple[str, str]] = {}
        self.texts: list[str] = []
        self.reruns: list[Rerun] = []
        self.bytes_in = 0
        self.frames: list[tuple[float, int]] = []
        self.timers: dict[str, tuple[float, asyncio.Task]] = {}
        self.watches: dict[bytes, float | None] = {}  # regex pattern -> first seen
        self._ws: Any = None
        self._pending: list[Rerun] = []
        self._run_start = 0.0
        self.finished: list[tuple[float, str, tuple[str, ...]]] = []
        self.run_bytes: list[tuple[bool, int]] = []  # (fragment run?, bytes of that run)
        self._run_bytes = 0
        self._idle = asyncio.Event()
        self._loaded = asyncio.Event()

    # ----- sending -------------------------------------------------------------------------
    async def _send_rerun(self, fragment: str = "", auto: bool = False) -> None:
        rerun = Rerun(time.monotonic(), fragment)
        self.reruns.append(rerun)
        self._pending.append(rerun)
        self._idle.clear()
        await self._ws.send(rerun_message(self.query, self.page_name, self.page_hash,
                                          self.widget_states, list(self.cache), fragment, auto))
        for wid, state in list(self.widget_states.items()):
            if state.WhichOneof("value") == "trigger_value":  # one-shot, as a browser
                del self.widget_states[wid]

    async def press(self, label: str) -> None:
        """Press the first button called `label` (a full-app rerun with its trigger)."""
        _, wid = self.widgets[label]
        self.widget_states[wid] = WidgetState(id=wid, trigger_value=True)
        await self._send_rerun()

    async def set_number(self, label: str, value: float) -> None:
        """Type `value` into the number input called `label` and press Enter."""
        _, wid = self.widgets[label]
        self.widget_states[wid] = WidgetState(id=wid, double_value=float(value))
        await self._send_rerun()

    async def set_text(self, label: str, value: str) -> None:
        """Type `value` into the text input called `label` and press Enter."""
        _, wid = self.widgets[label]
        self.widget_states[wid] = WidgetState(id=wid, string_value=str(value))
        await self._send_rerun()

    def watch(self, pattern: bytes) -> None:
        """Note the monotonic time when the regular expression `pattern` first matches a
        received frame (`watches[pattern]`)."""
        self.watches.setdefault(pattern, None)

    # ----- receiving -----------------------------------------------------------------------
    def _timer(self, fragment: str, interval: float) -> None:
        old = self.timers.get(fragment)
        if old and old[0] == interval:
            return
        if old:
            old[1].cancel()

        async def tick() -> None:
            while True:
                await asyncio.sleep(interval)
                await self._send_rerun(fragment, auto=True)

        self.timers[fragment] = (interval, asyncio.get_running_loop().create_task(tick()))

    def _clear_timers(self, fragments: tuple[str, ...] | None = None) -> None:
        for fid in list(self.timers) if fragments is None else fragments:
            if fid in self.timers:
                self.timers.pop(fid)[1].cancel()

    def _handle(self, frame: bytes) -> None:
        now = time.monotonic()
        parsed = parse_forward(frame)
        self.bytes_in += parsed.nbytes
        if self._pending:
            self._pending[0].nbytes += parsed.nbytes
        self.frames.append((now, parsed.nbytes))
        for pattern, seen in self.watches.items():
            if seen is None and re.search(pattern, frame):
                self.watches[pattern] = now
        if parsed.cache_hash:
            self.cache[parsed.cache_hash] = None
        self._run_bytes += parsed.nbytes
        if parsed.kind == "new_session":
            self._run_start = now
            self._run_bytes = parsed.nbytes
            if not parsed.fragment_ids:
                self._clear_timers()
                self.texts = []
        if parsed.page_hash:
            self.page_hash = parsed.page_hash
        for etype, label, wid in parsed.widgets:
            self.widgets.setdefault(label, (etype, wid))
            self.widgets[label] = (etype, wid)
        if parsed.text:
            self.texts.append(parsed.text)
            del self.texts[:-200]
        if parsed.auto_rerun:
            self._timer(*parsed.auto_rerun)
        if parsed.stop_fragments:
            self._clear_timers(parsed.stop_fragments)
        if parsed.finished:
            # requests sent before this run began were served by it (the server merges
            # queued requests of one fragment); later ones wait for the next run
            served = [r for r in self._pending if r.sent <= self._run_start] or self._pending[:1]
            for rerun in served:
                rerun.done = now
            self._pending = [r for r in self._pending if r.done is None]
            self.finished.append((now, parsed.finished, parsed.fragment_ids))
            self.run_bytes.append((bool(parsed.fragment_ids), self._run_bytes))
            self._run_bytes = 0
            if not parsed.fragment_ids:
                self._loaded.set()
            if not self._pending:
                self._idle.set()

    async def run(self, until: float, actions: Any = None) -> None:
        """Connect, load the page and rerun as a browser until monotonic time `until`;
        `actions(self)` (a coroutine function) runs beside the receiving loop."""
        from websockets.asyncio.client import connect

        async with connect(self.ws_url, subprotocols=["streamlit"], origin=self.origin,
                           max_size=None, compression=None, ping_interval=None,
                           open_timeout=120, additional_headers=self.headers) as ws:
            self._ws = ws
            await self._send_rerun()
            task = asyncio.get_running_loop().create_task(actions(self)) if actions else None
            try:
                while time.monotonic() < until:
                    try:
                        frame = await asyncio.wait_for(ws.recv(), until - time.monotonic())
                    except TimeoutError:
                        break
                    if isinstance(frame, bytes):
                        self._handle(frame)
            finally:
                self._clear_timers()
                if task:
                    task.cancel()

    async def loaded(self, timeout: float) -> bool:
        """Wait until a full-app run has finished (the page is drawn: True), at most `timeout`
        seconds (False). Fragment timers may keep requests pending meanwhile."""
        try:
            await asyncio.wait_for(self._loaded.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def idle(self, timeout: float) -> bool:
        """Wait until no rerun is pending (True), at most `timeout` seconds (False)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    def text_matching(self, pattern: str) -> re.Match | None:
        """The last received text body matching `pattern` (tags removed), or None."""
        for text in reversed(self.texts):
            found = re.search(pattern, _TAGS.sub("", text))
            if found:
                return found
        return None
