"""HTML recovery reports and JUnit XML for chaosbench runs (see docs/result.md)."""

from .errors import ReportInputError
from .junit import junit_tree, write_junit
from .render import render_index, render_run

__all__ = ["ReportInputError", "junit_tree", "render_index", "render_run", "write_junit"]
