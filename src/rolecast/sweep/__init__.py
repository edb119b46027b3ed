"""Sweeps: a matrix of workflow x task x model x sharing x seed cells, each an independent run directory,
run locally (in-process or a process pool) or on Ray; reruns skip finished cells and resume interrupted ones."""

from rolecast.sweep.cell import CellJob, CellResult, cell_state, run_cell
from rolecast.sweep.executors import LocalExecutor, PoolExecutor, RayExecutor, make_executor
from rolecast.sweep.matrix import Cell, Matrix, MatrixConfig, MatrixError, load_matrix
from rolecast.sweep.runner import SweepOutcome, cell_summary, run_sweep, summary_table

__all__ = [
    "Cell",
    "CellJob",
    "CellResult",
    "LocalExecutor",
    "Matrix",
    "MatrixConfig",
    "MatrixError",
    "PoolExecutor",
    "RayExecutor",
    "SweepOutcome",
    "cell_state",
    "cell_summary",
    "load_matrix",
    "make_executor",
    "run_cell",
    "run_sweep",
    "summary_table",
]
