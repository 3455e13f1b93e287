"""The websocket client of the load benchmark (bench/streamlit_ws.py): what it reads from the
server's ForwardMsgs and what it sends back, as Streamlit's frontend does."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from streamlit_ws import BrowserlessSession, parse_forward, rerun_message  # noqa: E402


def frame(build) -> bytes:
    msg = ForwardMsg()
    build(msg)
    return msg.SerializeToString()


def button(msg: ForwardMsg) -> None:
    msg.hash = "h1"
    msg.metadata.cacheable = True
    msg.delta.new_element.button.label = "Start"
    msg.delta.new_element.button.id = "$$ID-start"


def status(msg: ForwardMsg) -> None:
    msg.delta.new_element.markdown.body = "**Run #7** · status **running** · step 12/10000"


def fragment_finished(msg: ForwardMsg) -> None:
    msg.script_finished = ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY
    msg.metadata.run.fragment_ids.append("frag-1")


def test_forward_messages_are_read_as_the_frontend_reads_them():
    got = parse_forward(frame(button))
    assert (got.kind, got.widgets, got.cache_hash) == ("delta", [("button", "Start",
                                                                   "$$ID-start")], "h1")
    assert got.nbytes == len(frame(button))
    assert parse_forward(frame(status)).text.startswith("**Run #7**")
    rerun = parse_forward(frame(lambda m: (setattr(m.auto_rerun, "interval", 0.5),
                                           setattr(m.auto_rerun, "fragment_id", "frag-1"))))
    assert rerun.auto_rerun == ("frag-1", 0.5)
    stop = parse_forward(frame(lambda m: m.stop_auto_rerun.fragment_ids.extend(["a", "b"])))
    assert stop.stop_fragments == ("a", "b")
    done = parse_forward(frame(fragment_finished))
    assert (done.finished, done.fragment_ids) == ("FINISHED_FRAGMENT_RUN_SUCCESSFULLY",
                                                  ("frag-1",))
    page = parse_forward(frame(lambda m: setattr(m.navigation, "page_script_hash", "p9")))
    assert page.page_hash == "p9"
    assert parse_forward(frame(lambda m: setattr(m, "ref_hash", "h1"))).ref_hash == "h1"
    small = parse_forward(frame(lambda m: setattr(m, "hash", "h2")))
    assert small.cache_hash == ""  # not cacheable: never claimed as cached


def test_a_rerun_request_carries_what_a_browser_sends():
    widgets = {"w": WidgetState(id="w", double_value=0.002)}
    back = BackMsg()
    back.ParseFromString(rerun_message("optimizer=adam", "train", "", widgets, ["h1"],
                                       fragment_id="frag-1", auto=True))
    state = back.rerun_script
    assert (state.query_string, state.page_name, state.page_script_hash) == (
        "optimizer=adam", "train", "")
    assert (state.fragment_id, state.is_auto_rerun) == ("frag-1", True)
    assert list(state.cached_message_hashes) == ["h1"]
    assert state.widget_states.widgets[0].double_value == 0.002
    again = BackMsg()
    again.ParseFromString(rerun_message("", "train", "p9", {}, []))
    assert (again.rerun_script.page_name, again.rerun_script.page_script_hash) == ("", "p9")


class FakeSocket:
    def __init__(self):
        self.sent: list[BackMsg] = []

    async def send(self, data: bytes) -> None:
        msg = BackMsg()
        msg.ParseFromString(data)
        self.sent.append(msg)


def test_the_session_keeps_timers_cache_and_widgets_as_a_browser():
    async def scenario() -> tuple[BrowserlessSession, FakeSocket]:
        session = BrowserlessSession("http://127.0.0.1:1/train?optimizer=adam")
        session._ws = socket = FakeSocket()
        await session._send_rerun()
        session._handle(frame(lambda m: m.new_session.SetInParent()))
        session._handle(frame(lambda m: setattr(m.navigation, "page_script_hash", "p9")))
        session._handle(frame(button))
        session._handle(frame(status))
        session._handle(frame(lambda m: (setattr(m.auto_rerun, "interval", 0.05),
                                         setattr(m.auto_rerun, "fragment_id", "frag-1"))))
        session._handle(frame(lambda m: setattr(m, "script_finished",
                                                ForwardMsg.FINISHED_SUCCESSFULLY)))
        assert await session.loaded(1.0)
        assert session.text_matching(r"Run #(\d+) · status (\w+)").groups() == ("7", "running")
        await asyncio.sleep(0.18)  # the fragment timer: about 3 auto reruns
        await session.press("Start")
        session._handle(frame(lambda m: m.new_session.SetInParent()))  # full run: timers off
        assert session.text_matching("status") is None  # a full run draws the page anew
        count = len(socket.sent)
        await asyncio.sleep(0.12)
        assert len(socket.sent) == count
        return session, socket

    session, socket = asyncio.run(scenario())
    first, *autos, press = socket.sent
    assert first.rerun_script.page_name == "train" and not first.rerun_script.fragment_id
    assert 1 <= len(autos) <= 4  # 0.18 s at 0.05 s: 3 ticks, fewer when the loop is late
    assert all(m.rerun_script.fragment_id == "frag-1" and m.rerun_script.is_auto_rerun
               for m in autos)
    assert autos[0].rerun_script.page_script_hash == "p9"
    assert list(autos[0].rerun_script.cached_message_hashes) == ["h1"]
    trigger = press.rerun_script.widget_states.widgets[0]
    assert (trigger.id, trigger.trigger_value) == ("$$ID-start", True)
    assert not session.widget_states  # a trigger is sent once
    assert session.reruns[0].done is not None  # the first request was served


def test_a_typed_text_stays_in_every_later_request():
    """`set_text` sends the text input's `string_value` with a page run, and, unlike a
    button's trigger, keeps sending it (a browser keeps a widget's value)."""
    def nickname(msg: ForwardMsg) -> None:
        msg.delta.new_element.text_input.label = "your nickname"
        msg.delta.new_element.text_input.id = "$$ID-nick"

    async def scenario() -> FakeSocket:
        session = BrowserlessSession("http://127.0.0.1:1/train?challenge=3")
        session._ws = socket = FakeSocket()
        await session._send_rerun()
        session._handle(frame(lambda m: m.new_session.SetInParent()))
        session._handle(frame(nickname))
        await session.set_text("your nickname", "ada")
        await session._send_rerun()
        return socket

    _, typed, later = asyncio.run(scenario()).sent
    for message in (typed, later):
        (state,) = message.rerun_script.widget_states.widgets
        assert (state.id, state.string_value) == ("$$ID-nick", "ada")
        assert not message.rerun_script.fragment_id  # a page run
