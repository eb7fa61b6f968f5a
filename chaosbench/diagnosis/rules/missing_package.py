"""A worker that died importing a package its node lacks: the job's own dependency, to be declared in
its scenario (trainer.requirements), which chaosbench installs into the nodes (cluster/jobenv)."""
from __future__ import annotations

import re

from chaosbench.cluster.jobenv.names import distribution_for
from chaosbench.cluster.jobenv.reqs import name_of

from ..model import Finding
from ..record import RunRecord

# "ModuleNotFoundError: No module named 'omegaconf'" / "... named 'omegaconf.errors'";
# "ImportError: cannot import name 'X' from 'pkg' (...)": an installed but wrong version
NO_MODULE = re.compile(r"^ModuleNotFoundError: No module named '([\w.]+)'")
NO_NAME = re.compile(r"^ImportError: cannot import name '(\w+)' from '([\w.]+)'")


def check(rec: RunRecord) -> list[Finding]:
    hits = []
    for node in sorted(rec.logs):
        for e in rec.errors(node):
            m = NO_MODULE.match(e.text) or NO_NAME.match(e.text)
            if m:
                hits.append((e, m))
    if not hits:
        return []
    e, m = hits[0]
    module = m.group(1) if m.re is NO_MODULE else m.group(2)
    dist = distribution_for(module)
    declared = (rec.scenario.get("trainer") or {}) if isinstance(rec.scenario, dict) else {}
    nodes = sorted({x.node for x, _ in hits})
    if m.re is NO_MODULE:
        title = f"The job imports {module!r}, which its nodes do not have ({len(hits)} failure(s) on {', '.join(nodes)})."
        fix = (f"declare it in the scenario: `trainer: {{requirements: [\"{dist}\"]}}` (or a line `{dist}` in "
               f"trainer.requirements_file); chaosbench installs it into the nodes before the cluster starts "
               f"(docs/byo-trainer.md, 'Your job's own packages')")
    else:
        title = (f"The job imports {m.group(1)!r} from {module!r}, which the nodes' version of it lacks "
                 f"({len(hits)} failure(s) on {', '.join(nodes)}).")
        fix = (f"pin the version the job was written for in the scenario: `trainer: {{requirements: "
               f"[\"{dist}==<version>\"]}}`; the job's packages come before the node image's on its path")
    if dist in {name_of(r) for r in declared.get("requirements") or [] if isinstance(r, str)}:
        fix += f" ({dist} is declared already: check the module name, or that the job runs under this scenario)"
    return [Finding(rule="job_package_missing", title=title, fix=fix,
                    effect="the workers import it and training starts instead of every restart failing the same way",
                    evidence=[x.evidence() for x, _ in hits[:3]], severity="cause")]
