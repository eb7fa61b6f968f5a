"""Faults on the supporting services: etcd and the S3 endpoint."""
from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from chaosbench.faults.base import Fault, FaultParams, start_stop
from chaosbench.faults.registry import register


class ServiceParams(FaultParams):
    service: Literal["etcd", "s3"]


def _service(fault: Fault) -> str:
    return fault.p.service


KillService = register(start_stop("kill_service", "kill etcd or the S3 endpoint; healed by starting it again",
                                  ServiceParams, _service, inject="kill_service", heal="start_service"))
PauseService = register(start_stop("pause_service", "freeze etcd or the S3 endpoint (requests hang); healed by "
                                   "unfreezing", ServiceParams, _service, inject="pause_service",
                                   heal="unpause_service"))


@register
class S3Outage(Fault):
    name = "s3_outage"
    help = "make S3 unreachable from the trainers (proxy route disabled); healed by restoring the route"

    def _inject(self):
        self.target = "s3"
        with self.proxy() as proxy:
            proxy.disable("s3")

    def _heal(self):
        with self.proxy() as proxy:
            proxy.enable("s3")


@register
class S3Error(Fault):
    name = "s3_error"
    help = "make the S3 endpoint answer every request with 403 (refused credentials) or 503 SlowDown"

    class Params(FaultParams):
        mode: Literal["403", "503"] = "503"

        @field_validator("mode", mode="before")
        @classmethod
        def _as_text(cls, v):
            return str(v)   # YAML reads 403 as a number

    def _inject(self):
        self.target = "s3"
        _set_s3(self.cluster, self.p.mode)

    def _heal(self):
        _set_s3(self.cluster, "ok")


def _set_s3(cluster, mode: str) -> None:
    from chaosbench.services.s3 import set_s3_fault
    set_s3_fault(cluster.s3_endpoint, mode)
