"""Service primitives: kill, start, pause or unpause etcd, S3 or the proxy in place, written once over
each backend's `_service_action`."""
from __future__ import annotations

from chaosbench.cluster.primitives import primitive


class ServicePrimitives:
    def _service_action(self, service: str, action: str) -> None:
        """kill | start | pause | unpause one service ('etcd' | 's3' | 'proxy') in place."""
        self._unsupported(f"{action}_service")

    @primitive(via="_service_action")
    def kill_service(self, service: str) -> None:
        self._service_action(service, "kill")

    @primitive(via="_service_action")
    def start_service(self, service: str) -> None:
        self._service_action(service, "start")

    @primitive(via="_service_action")
    def pause_service(self, service: str) -> None:
        self._service_action(service, "pause")

    @primitive(via="_service_action")
    def unpause_service(self, service: str) -> None:
        self._service_action(service, "unpause")
