"""views: the pages (thin): read session state, lay out components, send commands.

Each module draws one page with its `page()` function; `app.py` routes them with
`st.navigation`, in the order of `PAGES`. The page at URL `/<path>` is `views/<path>.py`.

May import: components and everything below it.
"""

from __future__ import annotations

from typing import NamedTuple


class PageEntry(NamedTuple):
    """One page of the app.

    Attributes:
        path: the page's URL path (`/train`) and its module (`views.train`); lessons and links
            name pages by it (`teaching.lessons.PAGE_URLS`, `components.links.page_link`).
        title: the navigation label and browser tab title.
        icon: a Material icon (`:material/<name>:`).
    """

    path: str
    title: str
    icon: str


HOME = "home"  # the default page: it answers at the app's root URL too
PAGES = (
    PageEntry(HOME, "Home", ":material/school:"),
    PageEntry("train", "Train", ":material/model_training:"),
    PageEntry("hypergrad", "Hyper-gradients", ":material/functions:"),
    PageEntry("inside_step", "Inside one step", ":material/step_into:"),
    PageEntry("landscape", "Landscape", ":material/landscape:"),
    PageEntry("plugins", "Plugins", ":material/extension:"),
    PageEntry("runs", "Runs", ":material/compare_arrows:"),
    PageEntry("class_board", "Class", ":material/groups:"),
    PageEntry("keras3", "Keras 3", ":material/upgrade:"),
    PageEntry("conventions", "Conventions", ":material/compare:"),
    PageEntry("precision_distribution", "Mixed precision & distribution", ":material/memory:"),
)
TITLES = {entry.path: entry.title for entry in PAGES}

__all__ = ["HOME", "PAGES", "PageEntry", "TITLES"]
