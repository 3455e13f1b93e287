"""The run store's SQL schema: the tables (see `runs.store` for what each holds) and the
columns added to `runs` since the first stores (migrated on open by `RunStore`).

`workers` (one row per warm worker process, `runs.worker_table`): `state` goes `warming`
(importing TensorFlow) -> `ready` (waiting for a run) -> `assigned` (a run id written by
`assign`, one transaction) -> `running` (the worker took it) -> `gone` (exited); `retired`
asks an idle worker to exit (pool shut down). `parent_pid` is the process whose pool started
it; `env` (JSON) the `OPTIMIZER_LAB_*` variables of the dispatcher at assignment (the plugin
folder it loaded may be newer than the worker).
"""

SCHEMA = """
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
CREATE TABLE IF NOT EXISTS scalars (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, value REAL
);
CREATE INDEX IF NOT EXISTS scalars_run ON scalars (run_id, name, step);
CREATE TABLE IF NOT EXISTS hyper_changes (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL,
    old REAL, new REAL NOT NULL, source TEXT NOT NULL, created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS hyper_changes_run ON hyper_changes (run_id, step);
CREATE TABLE IF NOT EXISTS slot_stats (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, variable TEXT NOT NULL, slot TEXT NOT NULL,
    norm REAL, mean REAL, std REAL
);
CREATE INDEX IF NOT EXISTS slot_stats_run ON slot_stats (run_id, variable, slot, step);
CREATE TABLE IF NOT EXISTS histograms (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, variable TEXT NOT NULL, slot TEXT NOT NULL,
    lo REAL, hi REAL, counts TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS histograms_run ON histograms (run_id, variable, slot, step);
CREATE TABLE IF NOT EXISTS commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL, created REAL NOT NULL, kind TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL DEFAULT 'pending',
    message TEXT NOT NULL DEFAULT '', step INTEGER
);
CREATE INDEX IF NOT EXISTS commands_run ON commands (run_id, status);
CREATE TABLE IF NOT EXISTS hypergradients (
    run_id INTEGER NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL,
    exact REAL, one_step REAL, reverse REAL, val_loss REAL
);
CREATE INDEX IF NOT EXISTS hypergradients_run ON hypergradients (run_id, step);
CREATE TABLE IF NOT EXISTS response_slices (
    run_id INTEGER NOT NULL, request_id INTEGER NOT NULL, step INTEGER NOT NULL,
    name TEXT NOT NULL, value REAL NOT NULL, loss REAL, hypergradient REAL,
    center INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS response_slices_run ON response_slices (run_id, request_id);
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
# `on_tab_close`: `finish` or `stop` (see runs/control.py `TAB_CLOSE_ENV`).
# `owner`: the owner id of the browser session that started the run (`runs.ownership`); NULL
# for runs started from the CLI and for runs of stores created before owners were recorded.
# `pid_start`: the start time of the run's process (clock ticks since boot, `runs.processes`).
# `worker`: which kind of process trained the run: `warm` (a warm worker that had TensorFlow
# imported before the run was assigned, `runs.warm_pool`), `cold` (a process started for it),
# '' (not started yet, or a run trained in the caller's process).
# `taken_at`: when that process took the run (Unix s; after its TensorFlow import for `cold`);
# `taken_at - created` is the wait from Start to a process able to build the run.
ADDED_RUN_COLUMNS = (
    ("hypergradient_meta", "TEXT NOT NULL DEFAULT '{}'"),
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
                    "hypergradient_meta", "hyper_kinds")
