"""slurm.conf for the compose-hosted test cluster: one controller, N compute nodes, one partition.

proctrack/linuxproc (no cgroups in unprivileged containers) tracks a step's processes by ancestry,
so `scancel --signal` reaches torchrun's workers although they run in their own sessions.
"""
from __future__ import annotations

CONTROLLER = "slurmctl"


def compute_hosts(n: int) -> list[str]:
    return [f"slurmc{i}" for i in range(1, n + 1)]


def slurm_conf(hosts: list[str], cpus: int = 2, partition: str = "debug") -> str:
    lines = [
        "ClusterName=chaosbench",
        f"SlurmctldHost={CONTROLLER}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        "StateSaveLocation=/var/spool/slurmctld",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/linear",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",   # the conf's CPUs, whatever the container reports
        "KillWait=2",
        "MinJobAge=2",
        "InactiveLimit=0",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        f"NodeName={','.join(hosts)} CPUs={cpus} State=UNKNOWN",
        f"PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"
