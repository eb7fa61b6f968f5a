"""The fault primitives, one module per family; `Cluster` (base.py) inherits them all.

    nodes.py       kill / stop / start / pause a node, disconnect, wipe, grow, warm standbys
    preemption.py  preempt_node: SIGTERM the node, SIGKILL the rest after a grace
    workers.py     one rank's worker (kill / freeze / thaw) and cooperative job commands
    cpu_memory.py  throttle_node (CPU), squeeze_memory (the node's memory cgroup)
    clocks.py      skew_clock / restore_clock (libfaketime, node/clock.py)
    names.py       break_name / restore_names (the node's own resolver files)
    links.py       partition, degrade_link / netem_link / restore_link (nfqueue_link.py: the handler)
    disks.py       the FUSE disk layer (node/disk_layer.py), fill_nvme / free_nvme
    services.py    kill / start / pause etcd, S3 or the proxy

A primitive is declared one of two ways, and `Cluster.implementations()` says, per backend, which
file and method carries each (`python -m chaosbench.cluster.where`):

- `@primitive(via=hooks)`: written once here, over hooks each backend implements (`_run_in_node`,
  ...). A backend that implements the hooks has it; one may still override it (docker's cgroups).
- `@backend_primitive`: only the contract (signature and docstring) is here: each backend that has it
  implements it itself (docker: docker/backend.py). Called on a backend without it, it raises
  UnsupportedFault with `why`, or the backend's own reason (Cluster.unsupported_why).

Modules here import the node's scripts and the error types, never base.py (no import circle).
"""
from __future__ import annotations

import functools


def primitive(fn=None, *, via: str | tuple[str, ...] = (), why: str | None = None):
    """A primitive written once over `via`, the hook(s) it is built on: a backend that implements them
    supports it without overriding it. `why`: the refusal where a backend lacks a hook."""
    via = (via,) if isinstance(via, str) else tuple(via)

    def mark(impl):
        @functools.wraps(impl)
        def f(self, *args, **kwargs):   # refuse by name where the backend lacks a hook or withholds it
            if impl.__name__ not in self.supported_faults:
                self._unsupported(impl.__name__)
            return impl(self, *args, **kwargs)
        f.fault_primitive, f.via_hook, f.why = True, via, why
        return f
    return mark(fn) if fn is not None else mark


def backend_primitive(fn=None, *, why: str | None = None):
    """A primitive each backend implements itself: the decorated method's body is its docstring only;
    calling it on a backend that does not override it raises UnsupportedFault (`why`: the reason)."""
    def mark(contract):
        name = contract.__name__

        @functools.wraps(contract)
        def f(self, *args, **kwargs):
            self._unsupported(name)
        f.fault_primitive, f.via_hook, f.why = True, (), why
        return f
    return mark(fn) if fn is not None else mark

