"""An exported run zip imported WITH its records (`runs.io.bundle_import`, `RunStore.import_run`).

Round trip: every record table of a run equals, after export and import, the original table
(floats to 1e-12 relative, ints and text exactly). Refusals: each malformed table, member or
size is refused naming the file, column and line, and the store is unchanged. An imported run
is final: no command reaches it; the Train page shows it with its curves.
"""

from __future__ import annotations

import io
import re
import json
import zipfile

import numpy as np
import pandas as pd
import pytest

from engine import record_rows
from runs.io import bundle_import
from runs.service import control
from runs.io.bundle_import import read_run_bundle
from runs.io.export import export_run
from runs.protocol import IMPORTED
from runs.store.run_store import RunStore
from settings.config_file import ConfigImportError
from tests.fake_runs import add_fake_run

READERS = ("scalars", "hyper_changes", "slot_stats", "hypergradients", "response_slices",
           "lr_range", "landscape")


@pytest.fixture
def exported(tmp_path, monkeypatch):
    """(store, original run id, zip bytes) of a fake run holding rows in every record table."""
    monkeypatch.setenv("OPTIMIZER_LAB_HOME", str(tmp_path))
    return export_fake_run(RunStore(), tmp_path)


@pytest.fixture
def exported_any(any_store, tmp_path):
    """`exported` on each backend (SQLite, PostgreSQL: tests/conftest.py)."""
    return export_fake_run(any_store, tmp_path)


def export_fake_run(store: RunStore, tmp_path) -> tuple[RunStore, int, bytes]:
    run_id = add_fake_run(store, steps=40)
    store.append(run_id, hypergradients=[(s, "learning_rate", -0.5 / s, -0.4 / s,
                                          None if s % 20 else -0.45 / s, 2.0 - s / 100)
                                         for s in range(1, 41, 5)],
                 response_slices=[(7, 40, "learning_rate", v, 1.0 + v, -2.0 if c else None, c)
                                  for v, c in ((0.5e-3, 0), (1e-3, 1), (2e-3, 0))],
                 lr_range=[(9, k, 1e-4 * 2 ** k, 2.0 - k / 10 if k < 9 else None)
                           for k in range(1, 10)],
                 landscape=[(0, "grid", x, y, 1.0 + x * x + y) for x in (-1.0, 0.0, 1.0)
                            for y in (-1.0, 1.0)] + [(10, "path", 0.01, -0.02, 0.9)])
    paths = export_run(store, run_id, tmp_path / "exports", tensorboard=False)
    return store, run_id, paths.zip.read_bytes()


def tables_of(store: RunStore, run_id: int) -> dict[str, pd.DataFrame]:
    out = {reader: getattr(store, reader)(run_id).drop(columns=["created"], errors="ignore")
           for reader in READERS}
    stats = store.slot_stats(run_id)
    out["histograms"] = pd.concat(
        [store.histograms(run_id, v, s).assign(variable=v, slot=s)
         for v, s in dict.fromkeys(zip(stats["variable"], stats["slot"]))], ignore_index=True)
    return out


def assert_same_table(a: pd.DataFrame, b: pd.DataFrame, name: str) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b), name
    for column in a.columns:
        left, right = a[column].tolist(), b[column].tolist()
        if a[column].dtype.kind == "f":
            np.testing.assert_allclose(np.asarray(right, float), np.asarray(left, float),
                                       rtol=1e-12, equal_nan=True, err_msg=f"{name}.{column}")
        else:
            assert left == right, (name, column)


def test_an_imported_run_has_every_record_of_the_original(exported_any):
    exported = exported_any
    store, run_id, data = exported
    bundle = read_run_bundle(data)
    assert bundle.rows == sum(len(rows) for rows in bundle.tables.values()) > 300
    new = store.import_run(bundle.config.to_json_dict(), bundle.tables, name="again",
                           message="from a test",
                           details={"optimizer_config": {"name": "Adam"}})
    original, imported = tables_of(store, run_id), tables_of(store, new)
    for name in original:
        assert not original[name].empty, name
        assert_same_table(original[name], imported[name], name)
    run = store.run(new)
    assert (run["status"], run["step"], run["name"]) == (IMPORTED, 40, "again")
    assert run["config"] == store.run(run_id)["config"]
    assert run["optimizer_config"] == {"name": "Adam"}


def test_an_export_without_the_diagnostics_tables_still_imports(exported):
    store, _, data = exported
    older = rewrite(data, lambda name, body: None if re.search(r"/(lr_range|landscape)\.",
                                                               name) else body)
    bundle = read_run_bundle(older)
    assert "lr_range" not in bundle.tables and len(bundle.tables["scalars"]) > 0
    new = store.import_run(bundle.config.to_json_dict(), bundle.tables)
    assert store.lr_range(new).empty and not store.scalars(new).empty


def test_an_imported_run_is_never_steered(exported):
    store, _, data = exported
    bundle = read_run_bundle(data)
    new = store.import_run(bundle.config.to_json_dict(), bundle.tables)
    for send in (lambda: control.set_hyper(store, new, "learning_rate", 0.01),
                 lambda: control.pause(store, new), lambda: control.stop(store, new),
                 lambda: control.set_speed(store, new, 5.0)):
        with pytest.raises(ValueError, match="imported|not active|ended"):
            send()
    assert store.commands(new).empty


def rewrite(data: bytes, change) -> bytes:
    """The zip with `change(name, bytes) -> bytes | None` applied to every member (None drops
    it); `change` may also return a dict of members to add under `"__add__"`."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            new = change(info.filename, source.read(info))
            if new is not None:
                target.writestr(info.filename, new)
        for name, content in getattr(change, "add", {}).items():
            target.writestr(name, content)
    return out.getvalue()


def edit_csv(table: str, edit):
    """A `rewrite` change that edits `run-*/<table>.csv` as a DataFrame of text cells."""
    def change(name: str, content: bytes) -> bytes:
        if not name.endswith(f"/{table}.csv"):
            return content
        frame = pd.read_csv(io.BytesIO(content), dtype=str, keep_default_na=False)
        return edit(frame).to_csv(index=False).encode()
    return change


def set_cell(row: int, column: str, value: str):
    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        frame.loc[row, column] = value
        return frame
    return edit


MALFORMED = {
    "missing column": (edit_csv("scalars", lambda f: f.drop(columns=["value"])),
                       r"scalars\.csv: columns \['step', 'name'\] refused.*missing \['value'\]"),
    "extra column": (edit_csv("slot_stats", lambda f: f.assign(evil="1")),
                     r"slot_stats\.csv: columns .* refused.*unknown \['evil'\]"),
    "not a number": (edit_csv("scalars", set_cell(3, "value", "__import__('os')")),
                     r"scalars\.csv, column 'value', line 5: .* is not a number"),
    "empty required cell": (edit_csv("slot_stats", set_cell(0, "norm", "")),
                            r"slot_stats\.csv, column 'norm', line 2: empty cell"),
    "infinite": (edit_csv("scalars", set_cell(1, "value", "inf")),
                 r"scalars\.csv, column 'value', line 3: not a finite number"),
    "negative step": (edit_csv("scalars", set_cell(2, "step", "-1")),
                      r"scalars\.csv, column 'step', line 4: outside \[0, 1,000,000,000\]"),
    "fractional step": (edit_csv("hyper_changes", set_cell(0, "step", "1.5")),
                        r"hyper_changes\.csv, column 'step', line 2: not an integer"),
    "duplicate row": (edit_csv("scalars", lambda f: pd.concat([f, f.iloc[[4]]],
                                                              ignore_index=True)),
                      r"scalars\.csv, line \d+: duplicate row for step=\d+, name=\w+"),
    "bad counts": (edit_csv("histograms", set_cell(0, "counts", "[1, -2]")),
                   r"histograms\.csv, column 'counts', line 2: counts must be a JSON list"),
    "long text": (edit_csv("hyper_changes", set_cell(0, "source", "x" * 201)),
                  r"hyper_changes\.csv, column 'source', line 2: text longer than 200"),
    "missing table": (lambda n, c: None if n.endswith("/histograms.csv") else c,
                      r"no histograms\.csv"),
    "not csv": (lambda n, c: b"\xff\xfe\x00garbage" if n.endswith("/scalars.csv") else c,
                r"scalars\.csv: (not a readable CSV|columns)"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_export_is_refused_naming_file_column_line_and_nothing_is_stored(
        exported, case):
    store, _, data = exported
    change, message = MALFORMED[case]
    before = store.runs()
    with pytest.raises(ConfigImportError, match=message):
        read_run_bundle(rewrite(data, change))
    pd.testing.assert_frame_equal(store.runs(), before)


def test_sizes_and_member_counts_are_bounded_from_the_headers(exported, monkeypatch):
    _, _, data = exported
    monkeypatch.setattr(bundle_import, "MAX_TABLE_BYTES", 1000)
    with pytest.raises(ConfigImportError, match=r"[a-z_]+\.csv refused: [\d,]+ bytes once "
                                                r"inflated, at most 1,000"):
        read_run_bundle(data)
    monkeypatch.setattr(bundle_import, "MAX_TABLE_BYTES", 128 * 2**20)
    monkeypatch.setattr(bundle_import, "MAX_TOTAL_BYTES", 5000)
    with pytest.raises(ConfigImportError, match=r"the tables refused: [\d,]+ bytes"):
        read_run_bundle(data)
    monkeypatch.setattr(bundle_import, "MAX_MEMBERS", 5)
    with pytest.raises(ConfigImportError, match=r"members refused: an exported run holds at "
                                                r"most 5"):
        read_run_bundle(data)


def test_member_names_outside_the_run_folder_are_never_read(exported):
    store, _, data = exported

    def change(name: str, content: bytes) -> bytes:
        return content
    change.add = {"../escape/scalars.csv": b"step,name,value\n1,x,evil\n",
                  "run-999/scalars.csv": b"step,name,value\n1,x,evil\n"}
    bundle = read_run_bundle(rewrite(data, change))  # the extra members are not tables
    assert all(row[1] != "x" for row in bundle.tables["scalars"])


def test_a_failing_insert_rolls_the_whole_import_back(exported_any, monkeypatch):
    exported = exported_any
    store, _, data = exported
    bundle = read_run_bundle(data)
    before = store.runs()
    real = record_rows.stored_params

    def fail_on_histograms(table, run_id, rows, now):
        if table == "histograms":
            raise RuntimeError("simulated failure in the middle of the import")
        return real(table, run_id, rows, now)

    monkeypatch.setattr(record_rows, "stored_params", fail_on_histograms)
    with pytest.raises(RuntimeError, match="simulated"):
        store.import_run(bundle.config.to_json_dict(), bundle.tables)
    pd.testing.assert_frame_equal(store.runs(), before)
    with store._connect() as con:
        assert con.execute("SELECT COUNT(*) FROM scalars WHERE run_id NOT IN "
                           "(SELECT id FROM runs)").fetchone()[0] == 0


def test_the_train_page_draws_an_imported_run_like_the_original(exported):
    from tests._pages import app_test, open_page

    store, run_id, data = exported
    bundle = read_run_bundle(data)
    new = store.import_run(bundle.config.to_json_dict(), bundle.tables)
    specs = {}
    for rid in (run_id, new):
        at = open_page(app_test(default_timeout=60), "train")
        at.session_state["run_select"] = rid
        at.run()
        assert not at.exception, at.exception
        charts = {json.loads(c.proto.spec)["layout"].get("title", {}).get("text", ""):
                  json.loads(c.proto.spec)["data"] for c in at.get("plotly_chart")}
        specs[rid] = {title: [(t.get("name"), t.get("x"), t.get("y")) for t in traces]
                      for title, traces in charts.items() if title in ("Loss",
                                                                      "Validation accuracy")}
        assert any("imported" in m.value for m in at.markdown) or rid == run_id
    assert specs[run_id] == specs[new] and specs[new]["Loss"][0][1]
