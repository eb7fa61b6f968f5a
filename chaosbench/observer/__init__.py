"""Watches a running cluster: tails the trainers' events for progress and triggers."""
from chaosbench.observer.progress import Progress  # noqa: F401
from chaosbench.observer.tail import EventTail, read_events  # noqa: F401
