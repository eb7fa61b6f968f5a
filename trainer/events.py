"""The trainer's event stream is chaosbench.instrument's writer (docs/events.md): one writer in the
project, so the reference trainer and a user's instrumented job write the same lines."""
from chaosbench.instrument.writer import EventWriter, node_name, read_events

__all__ = ["EventWriter", "node_name", "read_events"]
