"""Built-in failure models: causes, their rates, and the chaosbench fault class each maps to.

Sources (full citations and the mapping's reasons in docs/plan-a-run.md):

- `llama3-405b`: The Llama 3 Herd of Models (Meta, 2024), Table 5: 419 unexpected interruptions in
  a 54-day snapshot of pre-training on 16,384 H100 GPUs. The counts sum to 419 (the paper's
  "30.1 %" beside faulty GPU's 148 does not: 148 / 419 = 35.3 %; we use the counts).
- `rsc`: Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research Clusters",
  HPCA 2025: mean time to failure 7.9 h for 1,024-GPU jobs, 1.8 h projected at 16,384 GPUs. We
  interpolate the job failure rate as a power law of the GPU count through those two points; the
  paper's totals carry no per-cause split here, so the cause mix is Llama 3's (an assumption, printed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Cause:
    name: str
    klass: str
    per_gpu_hour: float | None = None   # exactly one of the two rates
    per_node_day: float | None = None

    def job_rate_per_hour(self, gpus: int, gpus_per_node: int) -> float:
        if self.per_gpu_hour is not None:
            return self.per_gpu_hour * gpus
        return (self.per_node_day or 0.0) * (gpus / gpus_per_node) / 24.0


@dataclass
class FailureModel:
    name: str
    source: str
    causes: list[Cause]
    # job-rate multiplier as a function of the GPU count (1.0: rates scale linearly with GPUs)
    scale: object = None
    notes: list[str] = field(default_factory=list)

    def rates_per_hour(self, gpus: int, gpus_per_node: int) -> dict[str, float]:
        k = self.scale(gpus) if callable(self.scale) else 1.0
        return {c.name: c.job_rate_per_hour(gpus, gpus_per_node) * k for c in self.causes}

    def class_of(self, cause: str) -> str:
        return next(c.klass for c in self.causes if c.name == cause)


# Llama 3 405B, Table 5: cause -> (count in 54 days on 16,384 GPUs, fault class). Why each class:
# a GPU, host or board fault takes its node out (node_loss); a software bug crashes the worker
# (worker_crash); switch, NIC and NCCL watchdog faults leave ranks hung in a collective until a
# timeout (hung_rank); silent data corruption and a failed dependency (storage, a service) roll
# every rank back to the last good persistent checkpoint (full_restart).
LLAMA3_CAUSES = {
    "faulty_gpu": (148, "node_loss"), "gpu_hbm3": (72, "node_loss"), "software_bug": (54, "worker_crash"),
    "network_switch_cable": (35, "hung_rank"), "host_maintenance": (32, "node_loss"),
    "gpu_sram": (19, "node_loss"), "gpu_system_processor": (17, "node_loss"), "nic": (7, "hung_rank"),
    "nccl_watchdog": (7, "hung_rank"), "silent_data_corruption": (6, "full_restart"),
    "gpu_thermal": (6, "node_loss"), "ssd": (3, "node_loss"), "power_supply": (3, "node_loss"),
    "server_chassis": (2, "node_loss"), "io_expansion_board": (2, "node_loss"),
    "dependency": (2, "full_restart"), "cpu": (2, "node_loss"), "system_memory": (2, "node_loss"),
}
LLAMA3_GPU_HOURS = 16_384 * 54 * 24
LLAMA3_TOTAL = sum(n for n, _ in LLAMA3_CAUSES.values())   # 419


def llama3() -> FailureModel:
    causes = [Cause(name, klass, per_gpu_hour=n / LLAMA3_GPU_HOURS) for name, (n, klass) in LLAMA3_CAUSES.items()]
    return FailureModel("llama3-405b", "Llama 3 405B, 419 interruptions / 54 days / 16,384 H100 (Meta 2024, Table 5)",
                        causes, notes=["llama3-405b: rates per GPU-hour by cause, constant (linear in GPUs)"])


RSC_POINTS = ((1024, 7.9), (16384, 1.8))   # (GPUs, MTTF hours), Kokolis et al. HPCA 2025


def rsc() -> FailureModel:
    (n1, m1), (n2, m2) = RSC_POINTS
    b = math.log(m1 / m2) / math.log(n2 / n1)   # job rate ~ N^b
    base = llama3()
    total_per_gpu_hour = LLAMA3_TOTAL / LLAMA3_GPU_HOURS

    def scale(gpus: int) -> float:
        job_rate = (1.0 / m1) * (gpus / n1) ** b
        return job_rate / (total_per_gpu_hour * gpus)
    return FailureModel("rsc", "Meta RSC: MTTF 7.9 h at 1,024 GPUs, 1.8 h at 16,384 (Kokolis et al., HPCA 2025)",
                        base.causes, scale=scale,
                        notes=[f"rsc: job failure rate a power law through the two published MTTFs (rate ~ GPUs^{b:.2f})",
                               "rsc: cause mix assumed to be Llama 3's (the preset has totals only)"])


PRESETS = {"llama3-405b": llama3, "rsc": rsc}
