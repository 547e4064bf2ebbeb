"""Timed schedules (``Schedule``: segments, iteration log and request times as DataFrames), their
metrics, and their columnar files (``io``)."""

from llmopt.schedule.schedule import ITERATION_COLUMNS, REQUEST_COLUMNS, SEGMENT_COLUMNS, Schedule

__all__ = ["ITERATION_COLUMNS", "REQUEST_COLUMNS", "SEGMENT_COLUMNS", "Schedule"]
