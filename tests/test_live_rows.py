"""Incremental reads of a live run's scalars: `RunStore.scalars_since` and the page's copy
(`components.live_rows`).

Rows read since a cursor, batch after batch, must be exactly the full read: nothing lost (a
step whose scalars are split over two batches, another run writing in between) and nothing
read twice. The page's thinned copy must equal `RunStore.scalars(max_points=...)` at every
refresh, across the display widths (1 -> 2 -> 5 -> 10 steps for 10 points).
"""

from __future__ import annotations

import types

import pandas as pd
import pytest

from components import live_rows
from runs.store.records import display_width
from runs.store.run_store import RunStore
from settings.run_config import RunConfig

KEYS = ["step", "name", "value"]


def ordered(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[KEYS].sort_values(["step", "name"], kind="stable").reset_index(drop=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return RunStore(tmp_path_factory.mktemp("live-rows") / "runs.sqlite")


def new_run(store: RunStore) -> int:
    return store.create_run(RunConfig(steps=100).to_json_dict())


def batches(start: int, stop: int):
    """Rows of steps start..stop-1, split so that val_loss of the last step comes in the NEXT
    batch (the case a step cursor would lose)."""
    rows = [(s, "train_loss", 1.0 / s) for s in range(start, stop)]
    rows += [(s, "val_loss", 2.0 / s) for s in range(start, stop) if s % 3 == 0]
    late = [r for r in rows if r[0] == stop - 1 and r[1] == "val_loss"]
    return [r for r in rows if r not in late], late


def test_rows_since_a_cursor_are_the_full_read(store):
    mine, other = new_run(store), new_run(store)
    cursor, seen, late = 0, [], []
    for start in range(1, 61, 7):
        stop = min(start + 7, 61)
        now, late_next = batches(start, stop)
        store.append(mine, scalars=late + now, step=stop - 1)
        store.append(other, scalars=[(s, "train_loss", -1.0) for s in range(start, stop)],
                     step=stop - 1)
        late = late_next
        new, cursor = store.scalars_since(mine, cursor)
        seen.append(new)
        got = pd.concat(seen, ignore_index=True)
        assert not got.duplicated(["step", "name"]).any()
        assert (got["value"] > 0).all()  # never a row of the other run
        pd.testing.assert_frame_equal(ordered(got), ordered(store.scalars(mine)))
    again, same = store.scalars_since(mine, cursor)
    assert again.empty and same == cursor  # no new row: same cursor, nothing doubled
    store.append(mine, scalars=late)  # the last step's val_loss, one batch late
    again, _ = store.scalars_since(mine, cursor)
    assert again[KEYS].values.tolist() == [[60, "val_loss", 2.0 / 60]]
    only, _ = store.scalars_since(mine, 0, names=["val_loss"])
    assert set(only["name"]) == {"val_loss"} and len(only) == 20


@pytest.mark.parametrize("steps, max_points, width", [
    (0, 10, 1), (10, 10, 1), (11, 10, 2), (20, 10, 2), (21, 10, 5), (51, 10, 10),
    (101, 10, 20), (201, 10, 50), (2_000, 2_000, 1), (2_001, 2_000, 2), (10_001, 2_000, 10)])
def test_display_width_is_the_filter_of_a_full_read(steps, max_points, width):
    assert display_width(steps, max_points) == width


def test_the_page_copy_equals_the_thinned_full_read(store, monkeypatch):
    monkeypatch.setattr(live_rows, "st", types.SimpleNamespace(session_state={}))
    rid = new_run(store)
    reads = []
    real = store.records.scalars_since
    monkeypatch.setattr(store.records, "scalars_since",
                        lambda run_id, cursor=0, names=None: reads.append(cursor) or real(
                            run_id, cursor, names))
    for stop in range(4, 130, 9):  # widths 1, 2, 5, 10, 20 for 10 points
        rows = [(s, "train_loss", 1.0 / s) for s in range(max(stop - 9, 1), stop)]
        rows += [(s, "val_loss", 2.0 / s) for s in range(max(stop - 9, 1), stop) if s % 4 == 0]
        store.append(rid, scalars=rows, step=stop - 1)
        run = store.run(rid)
        got = live_rows.scalars(store, run, max_points=10)
        want = store.scalars(rid, max_points=10)
        pd.testing.assert_frame_equal(ordered(got), ordered(want))
    # a full read (cursor 0) only when the width changed: 1 -> 2 -> 5 -> 10 -> 20
    assert reads.count(0) == 5 and len(reads) == 14
