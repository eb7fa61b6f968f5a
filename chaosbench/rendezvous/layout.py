"""Where rendezvous state lives in etcd, for our v3 backend and for torchrun's v2 backends.

v3 (ours):  {prefix}/{run_id}/state          the DynamicRendezvous state (CAS on mod_revision)
            {prefix}/{run_id}/store/{key}    the c10d store keys of that run
            {prefix}/{run_id}/alive/{node}   one per live agent, on a short lease (liveness.py)
v2 (torch): /torch/elastic/rendezvous/{run_id}          etcd-v2 backend state (one key)
            /torch/elastic/store/{base64 key}           etcd-v2 store (shared by all runs)
            /torchelastic/p2p/run_{run_id}/...          etcd (legacy) backend, state and store
"""
DEFAULT_V3_PREFIX = "/chaosbench/rdzv"
V2_RDZV_PREFIX = "/torch/elastic/rendezvous"
V2_STORE_PREFIX = "/torch/elastic/store"
V2_LEGACY_PREFIX = "/torchelastic/p2p"    # torchrun's rdzv-conf etcd_prefix default


def check_run_id(run_id: str) -> str:
    if not run_id or "/" in run_id:
        raise ValueError(f"invalid rendezvous run id {run_id!r}: must be non-empty and contain no '/' "
                         f"(it becomes a path segment of the etcd keys)")
    return run_id


def v3_run_prefix(run_id: str, prefix: str = DEFAULT_V3_PREFIX) -> str:
    return f"{prefix.rstrip('/')}/{check_run_id(run_id)}/"


def v3_state_key(run_id: str, prefix: str = DEFAULT_V3_PREFIX) -> str:
    return v3_run_prefix(run_id, prefix) + "state"


def v3_store_prefix(run_id: str, prefix: str = DEFAULT_V3_PREFIX) -> str:
    return v3_run_prefix(run_id, prefix) + "store/"
