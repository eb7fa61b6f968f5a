"""The fault catalogue (the nemesis): one small class per fault, each with inject/heal."""
from chaosbench.faults.base import Fault, FaultContext, FaultLog  # noqa: F401
from chaosbench.faults.registry import catalogue, fault_names, get_fault, validate_params  # noqa: F401
