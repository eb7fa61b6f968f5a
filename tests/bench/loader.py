"""Import a bench/ script as a module (bench/ is not a package) for the duration of a test module."""
import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def import_bench(name: str):
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
