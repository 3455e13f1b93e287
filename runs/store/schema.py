"""The run store's SQL schema: the tables (see `runs.store.run_store` for what each holds) and the
columns added to `runs` since the first stores (migrated on open by `RunStore`). The record
tables are declared by their row types (`engine.record_rows`): `record_table_sql` builds each
`CREATE TABLE` from the same fields `record_rows.insert_sql` writes.

`workers` (one row per run host process, `runs.service.worker_table`): `state` goes `warming`
(importing TensorFlow) -> `ready` (training the runs whose `runs.worker` names it, taking more
while it has room) -> `retired` (its pool shut down: no new run, it drains) -> `gone` (exited).
`parent_pid` is the process whose pool started it; `run_id`/`assigned_at` the last run given to
it; `env` (JSON) the `OPTIMIZER_LAB_*` variables of the dispatcher at its last assignment (the
plugin folder it loaded may be newer than the host).
"""

import re

from engine.record_rows import ROW_TYPES, STORED_AFTER

# SQL type of a record-row field, from its annotation as written (`engine.record_rows` postpones
# annotations: NamedTuple keeps them as `ForwardRef`s of the text). A float is nullable: SQLite
# stores NaN as NULL. Sequences (histogram counts) are stored as JSON text.
_SQL_TYPES = {"int": "INTEGER NOT NULL", "str": "TEXT NOT NULL", "float": "REAL",
              "float | None": "REAL", "Sequence[int]": "TEXT NOT NULL"}
# Columns a value must reach even though the field is a plain float (the new value of a
# hyperparameter change; the hyperparameter value of a response-slice point).
_NOT_NULL = {("hyper_changes", "new"), ("response_slices", "value"),
             ("lr_range", "learning_rate"), ("landscape", "x"), ("landscape", "y")}
_DEFAULTS = {("response_slices", "center"): "0"}  # a point is not the centre unless marked
# Columns the store adds after the row's fields (`STORED_AFTER`): Unix seconds of the batch.
_STORED_AFTER_TYPE = "REAL NOT NULL"
# PostgreSQL has no implicit rowid: the record tables get it as an identity column.
_POSTGRES_ROWID = "rowid BIGINT GENERATED ALWAYS AS IDENTITY"


def record_table_sql(table: str, dialect: str = "sqlite") -> str:
    """`CREATE TABLE IF NOT EXISTS` of a record table: `run_id`, then the fields of its row type
    (`engine.record_rows.ROW_TYPES`) in order, then `STORED_AFTER`; the same columns
    `record_rows.insert_sql` writes. `dialect="postgresql"` adds the `rowid` column that
    SQLite has implicitly (insertion order: `ORDER BY step, rowid`), still in SQLite types
    (`schema_sql` translates them).

    Raises:
        KeyError: `table` is not a record table, or a field's annotation has no SQL type.
    """
    row_type = ROW_TYPES[table]
    columns = ["run_id INTEGER NOT NULL"]
    for field in row_type._fields:
        annotation = row_type.__annotations__[field]
        name = str(getattr(annotation, "__forward_arg__", annotation))  # annotations are text
        sql_type = _SQL_TYPES[name]
        if (table, field) in _NOT_NULL:
            sql_type += " NOT NULL"
        if (table, field) in _DEFAULTS:
            sql_type += f" DEFAULT {_DEFAULTS[table, field]}"
        columns.append(f"{field} {sql_type}")
    columns += [f"{name} {_STORED_AFTER_TYPE}" for name in STORED_AFTER.get(table, ())]
    if dialect == "postgresql":
        columns.append(_POSTGRES_ROWID)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n    " + ",\n    ".join(columns) + "\n);\n"


SCHEMA = "".join(record_table_sql(table) for table in ROW_TYPES) + """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    status TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    optimizer TEXT NOT NULL,
    dataset TEXT NOT NULL,
    model TEXT NOT NULL,
    seed INTEGER NOT NULL,
    device TEXT NOT NULL DEFAULT '',
    total_steps INTEGER NOT NULL,
    step INTEGER NOT NULL DEFAULT 0,
    config TEXT NOT NULL,
    optimizer_config TEXT NOT NULL DEFAULT '{}',
    hyper_variables TEXT NOT NULL DEFAULT '[]',
    versions TEXT NOT NULL DEFAULT '{}',
    traces INTEGER NOT NULL DEFAULT 0,
    pid INTEGER,
    heartbeat REAL
);
CREATE INDEX IF NOT EXISTS scalars_run ON scalars (run_id, name, step);
CREATE INDEX IF NOT EXISTS hyper_changes_run ON hyper_changes (run_id, step);
CREATE INDEX IF NOT EXISTS slot_stats_run ON slot_stats (run_id, variable, slot, step);
CREATE INDEX IF NOT EXISTS histograms_run ON histograms (run_id, variable, slot, step);
CREATE TABLE IF NOT EXISTS commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL, created REAL NOT NULL, kind TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL DEFAULT 'pending',
    message TEXT NOT NULL DEFAULT '', step INTEGER
);
CREATE INDEX IF NOT EXISTS commands_run ON commands (run_id, status);
CREATE INDEX IF NOT EXISTS hypergradients_run ON hypergradients (run_id, step);
CREATE INDEX IF NOT EXISTS response_slices_run ON response_slices (run_id, request_id);
CREATE INDEX IF NOT EXISTS diagnostics_run ON diagnostics (run_id, name, step);
CREATE INDEX IF NOT EXISTS lr_range_run ON lr_range (run_id, request_id, step);
CREATE INDEX IF NOT EXISTS landscape_run ON landscape (run_id, kind, step);
CREATE TABLE IF NOT EXISTS run_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL, created REAL NOT NULL, kind TEXT NOT NULL,
    actor TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS run_events_run ON run_events (run_id, id);
CREATE TABLE IF NOT EXISTS workers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'warming',
    pid INTEGER,
    pid_start INTEGER,
    parent_pid INTEGER NOT NULL,
    ready_at REAL,
    run_id INTEGER,
    assigned_at REAL,
    env TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS workers_state ON workers (state);
"""
# Columns added to `runs` after the first release: (name, SQL type and default). Added with a
# guarded ALTER TABLE so that older store files still open.
# `viewer_heartbeat`: last time the browser session that owns the run was seen (Unix s);
# `on_tab_close`: `finish` or `stop` (see runs/service/control.py `TAB_CLOSE_ENV`).
# `owner`: the owner id of the browser session that started the run (`runs.service.ownership`); NULL
# for runs started from the CLI and for runs of stores created before owners were recorded.
# `pid_start`: the start time of the run's process (clock ticks since boot, `runs.store.processes`).
# `worker`: which process trained the run: `host <id>` (the run host of that `workers` row,
# `runs.process.run_host`), `cold` (a process started for it alone), `warm` (a one-run warm
# worker, in stores written before run hosts), '' (not started yet, or a run trained in the
# caller's process).
# `taken_at`: when that process took the run (Unix s; after its TensorFlow import for `cold`);
# `taken_at - created` is the wait from Start to a process able to build the run.
ADDED_RUN_COLUMNS = (
    ("hypergradient_meta", "TEXT NOT NULL DEFAULT '{}'"),
    # the last correctness check on a copy of the run (`hypergrad.run_check.as_record`)
    ("correctness_check", "TEXT NOT NULL DEFAULT '{}'"),
    ("viewer_heartbeat", "REAL"),
    ("on_tab_close", "TEXT NOT NULL DEFAULT 'finish'"),
    ("owner", "TEXT"),
    ("pid_start", "INTEGER"),
    ("worker", "TEXT NOT NULL DEFAULT ''"),
    ("taken_at", "REAL"),
    # `optimizers.hyper_kinds.hyper_kinds_table` rows: what `_set_hyper` stored per hyperparameter
    ("hyper_kinds", "TEXT NOT NULL DEFAULT '[]'"),
)
JSON_RUN_COLUMNS = ("config", "optimizer_config", "hyper_variables", "versions",
                    "hypergradient_meta", "hyper_kinds", "correctness_check")

# The class board (`runs.store.challenges`): a teacher's challenges and the runs that joined
# one. `spec` is the challenge's JSON (`runs.service.challenges.ChallengeSpec`); `status` is
# `open` (runs may join) or `closed`; `owner` the teacher session's owner id. A run joins at
# most one challenge (`run_id` is the key); `nickname` is what the student typed (validated
# when joining, escaped wherever it is shown); `pinned` 1 marks a run the teacher highlights.
CHALLENGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS challenges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    title TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'open',
    owner TEXT NOT NULL DEFAULT '',
    closed REAL
);
CREATE TABLE IF NOT EXISTS challenge_runs (
    run_id INTEGER PRIMARY KEY,
    challenge_id INTEGER NOT NULL,
    nickname TEXT NOT NULL,
    joined REAL NOT NULL,
    pinned INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS challenge_runs_challenge ON challenge_runs (challenge_id, run_id);
"""
SCHEMA += CHALLENGE_SCHEMA

# Run hosts that are Ray actors (`runs.service.ray_hosts`), one row per such `workers` row:
# the actor's id (hex), the node it runs on and its pid there (written by the actor), the GPUs
# it reserved. Their `workers` row has no pid: a pid on another node means nothing here.
RAY_SCHEMA = """
CREATE TABLE IF NOT EXISTS ray_hosts (
    host_id INTEGER PRIMARY KEY,
    actor_id TEXT NOT NULL DEFAULT '',
    node_id TEXT NOT NULL DEFAULT '',
    node_pid INTEGER,
    gpus REAL NOT NULL DEFAULT 0,
    created REAL NOT NULL
);
"""
SCHEMA += RAY_SCHEMA


# Checkpoints kept in a PostgreSQL store (`runs.store.checkpoints.StoreCheckpoints`): one row per
# run, the `.npz` bytes of its latest checkpoint (its JSON document also in `meta`: the Runs
# page reads a checkpoint's step without fetching ~1 MB) and its continue request. A SQLite
# store keeps them as files beside itself, so `schema_sql` adds these tables for PostgreSQL only.
CHECKPOINT_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    run_id INTEGER PRIMARY KEY,
    written REAL NOT NULL,
    step INTEGER NOT NULL,
    meta TEXT NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS continue_requests (
    run_id INTEGER PRIMARY KEY,
    info TEXT NOT NULL
);
"""


# SQLite type -> PostgreSQL type, as written in the DDL above (upper case: column names are
# lower case and never match). SQLite's INTEGER and REAL are 64-bit; PostgreSQL's INTEGER and
# REAL are 32-bit, hence BIGINT and DOUBLE PRECISION (pid start times and Unix seconds need 64).
_POSTGRES_TYPES = (
    (r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b",
     "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (r"\bINTEGER\b", "BIGINT"),
    (r"\bREAL\b", "DOUBLE PRECISION"),
    (r"\bBLOB\b", "BYTEA"),
)


def postgres_ddl(sql: str) -> str:
    """SQLite DDL (`CREATE TABLE`/`CREATE INDEX`/`ALTER TABLE` as this module writes it) with
    its types translated for PostgreSQL (`_POSTGRES_TYPES`); any other text is unchanged."""
    for pattern, replacement in _POSTGRES_TYPES:
        sql = re.sub(pattern, replacement, sql)
    return sql


def schema_sql(dialect: str) -> str:
    """The whole schema (`SCHEMA`) for `dialect` (`sqlite` or `postgresql`): on PostgreSQL the
    record tables carry an explicit `rowid`, the checkpoint tables are added
    (`runs.store.checkpoints`) and every type is translated (`postgres_ddl`).

    Raises:
        ValueError: another dialect.
    """
    if dialect == "sqlite":
        return SCHEMA
    if dialect != "postgresql":
        raise ValueError(f"dialect={dialect!r} refused: must be 'sqlite' or 'postgresql'")
    text = SCHEMA + CHECKPOINT_SCHEMA  # checkpoints are files beside a SQLite store
    for table in ROW_TYPES:
        text = text.replace(record_table_sql(table), record_table_sql(table, dialect))
    return postgres_ddl(text)


# Columns added to `checkpoints` after its first release (PostgreSQL stores only). A row
# written before `meta` existed has NULL there and its document is read from `data`.
ADDED_CHECKPOINT_COLUMNS = (("meta", "TEXT"),)


def added_columns(dialect: str) -> tuple[tuple[str, str, str], ...]:
    """(table, column, SQL type) of every column added since a table's first release, for a
    store of `dialect`: `ADDED_RUN_COLUMNS`, and `ADDED_CHECKPOINT_COLUMNS` on PostgreSQL."""
    found = tuple(("runs", column, sql_type) for column, sql_type in ADDED_RUN_COLUMNS)
    if dialect == "postgresql":
        found += tuple(("checkpoints", column, sql_type)
                       for column, sql_type in ADDED_CHECKPOINT_COLUMNS)
    return found


def add_column_sql(table: str, column: str, sql_type: str, dialect: str) -> str:
    """`ALTER TABLE ... ADD COLUMN` of a column added since the first stores (PostgreSQL:
    `IF NOT EXISTS`, types translated; SQLite has no IF NOT EXISTS: the caller checks)."""
    if dialect == "postgresql":
        return postgres_ddl(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {sql_type}")
    return f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}"
