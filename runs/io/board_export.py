"""Export a challenge's board: every run's hyperparameters (as they are now), score and curves,
as CSV and Parquet (pandas; Parquet through pyarrow), in one zip.

The zip holds `runs.csv`/`runs.parquet` (one row per run: `Board.runs` without the owner id,
which identifies a browser session) and `curves.csv`/`curves.parquet` (long table
`run_id, nickname, step, name, value`: train loss at the board's resolution, every validation
point). No Streamlit, no TensorFlow.
"""

from __future__ import annotations

import io
import zipfile

import pandas as pd

from runs.service.challenge_board import Board


def export_tables(board: Board) -> dict[str, pd.DataFrame]:
    """`{"runs": ..., "curves": ...}`: the exported tables (see the module docstring)."""
    runs = board.runs.drop(columns=["owner"], errors="ignore").reset_index(drop=True)
    names = runs.set_index("run_id")["nickname"]
    curves = board.curves.assign(nickname=board.curves["run_id"].map(names))
    curves = curves[["run_id", "nickname", "step", "name", "value"]].reset_index(drop=True)
    return {"runs": runs, "curves": curves}


def board_zip(board: Board) -> bytes:
    """The zip's bytes: `runs.csv`, `runs.parquet`, `curves.csv`, `curves.parquet`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, table in export_tables(board).items():
            archive.writestr(f"{name}.csv", table.to_csv(index=False))
            parquet = io.BytesIO()
            table.to_parquet(parquet, index=False)
            archive.writestr(f"{name}.parquet", parquet.getvalue())
    return buffer.getvalue()
