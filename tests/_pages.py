"""Opening a page under AppTest. The pages are functions routed by `app.py` (`views.PAGES`):

- `page_test("runs")` draws `views.runs.page()` alone (no navigation, no sidebar services), the
  fastest way to test one page;
- `app_test()` runs `app.py`, and `open_page(at, "train")` switches it to the page at `/train`
  (AppTest's own `switch_page` finds page files only; a page given as a function is named by
  the hash of its URL path, as a browser at `/train` asks for it).
"""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


def page_script(path: str) -> str:
    """The script that draws page `views.<path>` alone."""
    return f"from views.{path} import page\n\npage()\n"


def page_test(path: str, default_timeout: float = 60) -> AppTest:
    """An AppTest (not run yet) of page `views.<path>` alone."""
    return AppTest.from_string(page_script(path), default_timeout=default_timeout)


def app_test(default_timeout: float = 60) -> AppTest:
    """An AppTest (not run yet) of the whole app (`app.py`), opening on Home."""
    return AppTest.from_file(APP, default_timeout=default_timeout)


def open_page(at: AppTest, path: str) -> AppTest:
    """Switch `at` (an AppTest of `app.py`) to the page at URL path `path` on its next run."""
    from views import TITLES

    if path not in TITLES:
        raise ValueError(f"page {path!r} is not routed; known: {', '.join(TITLES)}")
    at._page_hash = calc_hash(path)
    return at
