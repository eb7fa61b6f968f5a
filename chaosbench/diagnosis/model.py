"""What a diagnosis says: the root cause of a failed or slow run and the findings, each with the
evidence it rests on, the change that fixes it and, where chaosbench measured it, the expected effect.
Plain dataclasses with `to_dict()` (the `diagnosis.json` schema, docs/diagnosis.md)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Evidence:
    text: str                       # the line, event or inventory entry, as recorded
    source: str                     # where: "logs/node-1.log:42", "events/agent-node-0.jsonl", "inventories/f1.json"
    ts: float | None = None         # unix seconds, when the record has a time
    log: str | None = None          # for a log line: the log's file name, so a report can link into its logs view
    line: int | None = None         # 1-based line number in that log


@dataclass
class Finding:
    rule: str                       # the rule's id, e.g. "rdzv_keepalive_default"
    title: str                      # one sentence: what is wrong, on which node, because of what
    fix: str                        # the change that fixes it
    effect: str                     # the expected effect of the change (a measured figure where there is one)
    evidence: list[Evidence] = field(default_factory=list)
    severity: str = "warning"       # "cause": it broke or failed the run; "warning": it cost time or work
    measured: str | None = None     # where the expected effect's figure comes from (a doc or a run)


@dataclass
class RootCause:
    summary: str                    # "node-1's rank 0 failed 4 times with: PermissionError: ..."
    node: str | None
    error: str | None               # the error line that started it
    first_failure_at: float | None
    repeats: int = 1                # how many restarts of that node ended with this same error
    consequences: list[str] = field(default_factory=list)   # peers' errors that followed it
    fault_id: str | None = None     # set when the injected fault started it (the errors are what it did)
    evidence: list[Evidence] = field(default_factory=list)


@dataclass
class Diagnosis:
    root_cause: RootCause | None
    findings: list[Finding] = field(default_factory=list)
    schema_version: int = 1

    def to_dict(self) -> dict:
        return asdict(self)

    def first_line(self) -> str | None:
        """The one line a summary shows: the first finding that is a cause, else the root cause, else the first finding."""
        causes = [f for f in self.findings if f.severity == "cause"]
        if causes:
            return f"{causes[0].title} Fix: {causes[0].fix}"
        if self.root_cause:
            return self.root_cause.summary
        if self.findings:
            return f"{self.findings[0].title} Fix: {self.findings[0].fix}"
        return None
