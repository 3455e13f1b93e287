"""The record tables of the store are declared by their row types (`engine.record_rows`): the
`CREATE TABLE` of each (`runs.store.schema.record_table_sql`) has exactly the columns
`record_rows.insert_sql` writes, in order, with the types and constraints of the store files
written so far."""

from __future__ import annotations

import sqlite3

from engine import record_rows
from runs.store.schema import SCHEMA, record_table_sql

# (name, type, not null, default) of every record table's columns in the store files so far
EXPECTED = {
    "scalars": [("run_id", "INTEGER", 1, None), ("step", "INTEGER", 1, None),
                ("name", "TEXT", 1, None), ("value", "REAL", 0, None)],
    "hyper_changes": [("run_id", "INTEGER", 1, None), ("step", "INTEGER", 1, None),
                      ("name", "TEXT", 1, None), ("old", "REAL", 0, None),
                      ("new", "REAL", 1, None), ("source", "TEXT", 1, None),
                      ("created", "REAL", 1, None)],
    "slot_stats": [("run_id", "INTEGER", 1, None), ("step", "INTEGER", 1, None),
                   ("variable", "TEXT", 1, None), ("slot", "TEXT", 1, None),
                   ("norm", "REAL", 0, None), ("mean", "REAL", 0, None),
                   ("std", "REAL", 0, None)],
    "histograms": [("run_id", "INTEGER", 1, None), ("step", "INTEGER", 1, None),
                   ("variable", "TEXT", 1, None), ("slot", "TEXT", 1, None),
                   ("lo", "REAL", 0, None), ("hi", "REAL", 0, None),
                   ("counts", "TEXT", 1, None)],
    "hypergradients": [("run_id", "INTEGER", 1, None), ("step", "INTEGER", 1, None),
                       ("name", "TEXT", 1, None), ("exact", "REAL", 0, None),
                       ("one_step", "REAL", 0, None), ("reverse", "REAL", 0, None),
                       ("val_loss", "REAL", 0, None)],
    "response_slices": [("run_id", "INTEGER", 1, None), ("request_id", "INTEGER", 1, None),
                        ("step", "INTEGER", 1, None), ("name", "TEXT", 1, None),
                        ("value", "REAL", 1, None), ("loss", "REAL", 0, None),
                        ("hypergradient", "REAL", 0, None), ("center", "INTEGER", 1, "0")],
    "diagnostics": [("run_id", "INTEGER", 1, None), ("step", "INTEGER", 1, None),
                    ("name", "TEXT", 1, None), ("variable", "TEXT", 1, None),
                    ("value", "REAL", 0, None), ("seconds", "REAL", 0, None)],
    "lr_range": [("run_id", "INTEGER", 1, None), ("request_id", "INTEGER", 1, None),
                 ("step", "INTEGER", 1, None), ("learning_rate", "REAL", 1, None),
                 ("loss", "REAL", 0, None)],
    "landscape": [("run_id", "INTEGER", 1, None), ("step", "INTEGER", 1, None),
                  ("kind", "TEXT", 1, None), ("x", "REAL", 1, None), ("y", "REAL", 1, None),
                  ("loss", "REAL", 0, None)],
}


def test_record_tables_are_derived_from_the_row_types():
    con = sqlite3.connect(":memory:")
    con.executescript(SCHEMA)
    assert set(EXPECTED) == set(record_rows.ROW_TYPES)
    for table, columns in EXPECTED.items():
        found = [tuple(row[1:5]) for row in con.execute(f"PRAGMA table_info({table})")]
        assert found == columns, table
        inserted = record_rows.insert_sql(table).split("(")[1].split(")")[0].split(", ")
        assert inserted == [name for name, *_ in columns], table
        assert record_table_sql(table) in SCHEMA


POSTGRES_TYPES = {"INTEGER": "bigint", "REAL": "double precision", "TEXT": "text"}


def test_postgres_tables_are_the_same_declaration_translated(postgres_database, tmp_path):
    """On PostgreSQL the same declaration gives the same columns in the same order, with
    64-bit types (SQLite's INTEGER and REAL are 64-bit), plus the `rowid` SQLite has
    implicitly; every other table has the columns of its SQLite twin."""
    import psycopg

    from runs.store.run_store import RunStore

    RunStore(postgres_database)
    RunStore(tmp_path / "runs.sqlite")  # its twin, migrated columns included
    sqlite = sqlite3.connect(tmp_path / "runs.sqlite")
    with psycopg.connect(postgres_database) as con:
        def columns(table):
            return con.execute(
                "SELECT column_name, data_type, is_nullable, column_default, is_identity FROM"
                " information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
                (table,)).fetchall()

        for table, expected in EXPECTED.items():
            found = columns(table)
            assert [(n, t, nullable == "NO", d) for n, t, nullable, d, _ in found[:-1]] == [
                (n, POSTGRES_TYPES[t], bool(nn), d) for n, t, nn, d in expected], table
            assert found[-1][0] == "rowid" and found[-1][4] == "YES", table
        tables = [name for (name,) in sqlite.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        for table in set(tables) - set(EXPECTED):
            names = [row[1] for row in sqlite.execute(f"PRAGMA table_info({table})")]
            assert [row[0] for row in columns(table)] == names, table
