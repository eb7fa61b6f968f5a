"""A run's hold on its cluster, as cluster/lifecycle.UpDown: `with Hold(runner, cluster)` brings the
cluster up and, on every way out (a failed up() included), collects the evidence and tears it down --
or, with --keep-cluster, leaves it up and says where. A second Ctrl-C while collecting skips the rest
of the evidence, never the teardown (UpDown)."""
from __future__ import annotations

from chaosbench.cluster.lifecycle import UpDown
from chaosbench.evidence.collect import collect_evidence


class Hold(UpDown):
    def __init__(self, runner, cluster):
        self.runner, self.cluster = runner, cluster   # runner: chaosbench.runner.Runner

    @property
    def torn_down(self) -> bool:
        return self.cluster.torn_down

    def up(self) -> None:
        try:
            self.cluster.up()
        except BaseException:   # the logs of a cluster that failed half-way say why
            self.collect()
            raise

    def collect(self) -> None:
        r = self.runner
        r.progress.phase = "collecting"
        r.say("collecting logs and events")
        try:
            collect_evidence(self.cluster, r.run_dir, r.harness, r.walking, r.say)
        except KeyboardInterrupt:
            r.say("interrupted while collecting: tearing down without the rest of the logs")
            raise

    def down(self) -> None:
        say = self.runner.say
        if self.runner.opts.keep_cluster:
            say(f"--keep-cluster: cluster left up; {self.cluster.attach_hint()}")
            return
        try:
            self.cluster.down()
        finally:
            say("cluster torn down" if self.cluster.torn_down else "teardown incomplete: the exit-time sweep "
                "retries; `chaosbench clean` removes what is left of runs that are gone")
