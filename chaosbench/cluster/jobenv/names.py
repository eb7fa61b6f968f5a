"""Which distribution (what `pip install` and trainer.requirements take) likely provides a module a job
failed to import: the module's top-level name is right for most, not for these common ones."""
from __future__ import annotations

from importlib import metadata

from packaging.utils import canonicalize_name

# import name -> distribution name, where they differ (the usual ModuleNotFoundError surprises)
KNOWN = {"yaml": "pyyaml", "cv2": "opencv-python-headless", "PIL": "pillow", "sklearn": "scikit-learn",
         "skimage": "scikit-image", "bs4": "beautifulsoup4", "dateutil": "python-dateutil", "attr": "attrs",
         "hydra": "hydra-core", "google.protobuf": "protobuf", "dotenv": "python-dotenv", "jwt": "pyjwt",
         "Crypto": "pycryptodome", "serial": "pyserial", "git": "gitpython", "magic": "python-magic",
         "nvidia_resiliency_ext": "nvidia-resiliency-ext", "torchft": "torchft", "dlrover": "dlrover",
         "ray": "ray", "etcd": "python-etcd", "etcd3": "etcd3"}


def distribution_for(module: str) -> str:
    """The likely distribution of `module` (dotted or top-level): the table, then what this python's
    installed metadata says provides it, else the top-level name itself."""
    top = module.split(".")[0]
    for name in (module, top):
        if name in KNOWN:
            return KNOWN[name]
    try:
        dists = metadata.packages_distributions().get(top)
    except Exception:   # a broken metadata entry of some other package must not hide the advice
        dists = None
    return canonicalize_name(dists[0]) if dists else canonicalize_name(top)
