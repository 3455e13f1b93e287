"""The live-refresh pace: pages watching live runs share a CPU budget (components.refresh_pace,
components.live_area.refresh_every)."""

from __future__ import annotations

import pytest

from components.live_area import HIDDEN_REFRESH_S, REFRESH_S, refresh_every
from components.refresh_pace import MAX_INTERVAL_S, RefreshPace


def test_one_page_refreshes_at_the_base_interval():
    pace = RefreshPace(budget_cores=1.0)
    assert pace.interval(now=0.0) == 0.5  # nobody yet
    for k in range(20):
        pace.note("a", 0.1, now=k * 0.5)
    assert pace.watchers(now=10.0) == 1
    assert pace.interval(now=10.0) == 0.5  # 1 x 0.1 s of CPU per refresh fits in 0.5 s


@pytest.mark.parametrize("sessions, cost, expected", [
    (10, 0.1, 1.0),   # 10 x 0.1 / 1 core = 1.0 s: exactly a step
    (11, 0.1, 2.0),   # 1.1 s -> rounded up to the next step
    (25, 0.1, 4.0),   # 2.5 s
    (50, 0.1, 8.0),   # 5.0 s
    (50, 0.5, MAX_INTERVAL_S),  # 25 s wanted: capped
])
def test_many_pages_share_the_budget(sessions, cost, expected):
    pace = RefreshPace(budget_cores=1.0)
    for s in range(sessions):
        pace.note(f"s{s}", cost, now=1.0)
    assert pace.watchers(now=2.0) == sessions
    assert pace.cost() == pytest.approx(cost)
    assert pace.interval(now=2.0) == expected
    two_cores = RefreshPace(budget_cores=2.0)
    for s in range(sessions):
        two_cores.note(f"s{s}", cost, now=1.0)
    assert two_cores.interval(now=2.0) <= expected  # a bigger budget never refreshes slower


def test_a_page_that_left_stops_counting_and_the_median_ignores_one_slow_refresh():
    pace = RefreshPace(budget_cores=1.0, window_s=10.0)
    for s in range(30):
        pace.note(f"s{s}", 0.1, now=0.0)
    pace.note("late", 5.0, now=9.0)
    assert pace.cost() == pytest.approx(0.1)
    assert pace.interval(now=9.5) == 4.0  # 31 x 0.1 = 3.1 s
    assert pace.watchers(now=10.5) == 1  # only "late" refreshed in the last 10 s
    assert pace.interval(now=10.5) == 0.5


@pytest.mark.parametrize("field, value", [("budget_cores", 0), ("base", -1.0),
                                           ("window_s", float("nan"))])
def test_bad_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        RefreshPace(**{field: value})


def test_the_timer_takes_the_pace_but_never_refreshes_faster_than_its_floor():
    assert refresh_every(True, False, 4.0) == 4.0
    assert refresh_every(True, False, 0.1) == REFRESH_S
    assert refresh_every(True, True, 2.0) == HIDDEN_REFRESH_S
    assert refresh_every(True, True, 8.0) == 8.0
    assert refresh_every(False, False, 4.0) is None


def test_the_budget_setting_is_read_and_bad_values_are_refused_naming_it():
    from components.refresh_pace import BUDGET_ENV, DEFAULT_BUDGET_CORES, budget_cores
    assert budget_cores({}) == DEFAULT_BUDGET_CORES
    assert budget_cores({BUDGET_ENV: "0.25"}) == 0.25
    for bad in ("0", "-1", "fast", "inf", "2000"):
        with pytest.raises(ValueError, match=BUDGET_ENV):
            budget_cores({BUDGET_ENV: bad})


def test_a_page_slows_down_at_once_but_speeds_up_only_with_room_to_spare():
    pace = RefreshPace(budget_cores=1.0)
    for s in range(30):
        pace.note(f"s{s}", 0.1, now=0.0)  # wanted 3.0 s -> 4 s
    assert pace.interval_from(2.0, now=1.0) == 4.0  # slower at once
    assert pace.interval_from(8.0, now=1.0) == 4.0  # 3.0 <= 0.75 x 4: room to spare
    pace = RefreshPace(budget_cores=1.0)
    for s in range(35):
        pace.note(f"s{s}", 0.1, now=0.0)  # wanted 3.5 s -> 4 s, but not 0.75 x 4 below
    assert pace.interval_from(8.0, now=1.0) == 8.0  # stays: one more page would flip it back
    assert pace.interval_from(4.0, now=1.0) == 4.0
