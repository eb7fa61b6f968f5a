"""Clock primitives: a node's wall clock moved by libfaketime, whose control file the harness rewrites
(node/clock.py). Written once over `_clock_file`, which docker and local implement."""
from __future__ import annotations

from pathlib import Path

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.node import clock
from chaosbench.cluster.primitives import backend_primitive, primitive

# why a backend without the clock hook (_clock_file) refuses clock faults
NO_CLOCK = ("no clock control: clock_skew needs every process of the node's training started under libfaketime with "
            "a control file the harness rewrites (docker and local have it; the Slurm backend does not start its "
            "nodes under the preload, and a site's hosts may not have libfaketime); use the docker or local backend")


class ClockPrimitives:
    def _clock_file(self, node: str) -> tuple[Path, dict[str, str]]:
        """The node's clock control file on the host (the harness writes it) and the preload env its
        processes carry (node/clock.py preload_env, with the paths as the node sees them)."""
        self._unsupported("skew_clock")

    @primitive(via=("_clock_file", "_run_in_node"), why=NO_CLOCK)
    def skew_clock(self, node: str, text: str, expect_s: float) -> dict:
        """Set the node's wall-clock offset (libfaketime's spec: "+30 x1", "+0 x1.0001"); a fresh preloaded
        process on the node must then read the wall clock expect_s from the real one (within 1 s).
        Returns {'seen_offset_s'} (None: the node is not running; the file is what its next start reads)."""
        self._check_node(node)
        if not self.spec.fake_clock:
            raise ClusterError(f"{node} runs without the libfaketime preload: it is set from the node's start "
                               "when the scenario has a clock_skew (ClusterSpec.fake_clock)")
        host, env = self._clock_file(node)
        clock.write(host, text)
        if self.node_status(node) != "running":
            return {"seen_offset_s": None}
        seen = float(self._run_in_node(node, clock.SEEN_OFFSET, env["FAKETIME_TIMESTAMP_FILE"],
                                       env["LD_PRELOAD"], timeout=60).strip())
        if abs(seen - expect_s) > 1.0:
            raise ClusterError(f"{node}: after writing {text!r} to {host}, a preloaded process reads the wall "
                               f"clock {seen:+.3f} s from the real one, not {expect_s:+g} s")
        return {"seen_offset_s": round(seen, 3)}

    @primitive(via=("_clock_file", "_run_in_node"), why=NO_CLOCK)
    def restore_clock(self, node: str) -> dict:
        """Write "+0 x1" back and verify that a preloaded process on the node reads real time (within 1 s)."""
        return self.skew_clock(node, clock.NO_SKEW, 0.0)

    @backend_primitive(why=(
        "clocks: all moves CLOCK_MONOTONIC, and libfaketime 0.9.10 (the node images') fakes it as the wall clock, "
        "and Python 3.11's timed waits then never return (threading.Event().wait(0.2) hung); time namespaces "
        "(unshare --time) offset it only for processes started after the fault, never the running trainer. "
        "Use clocks: realtime (what an NTP step moves)"))
    def skew_monotonic(self, node: str) -> None:
        """clock_skew with clocks: all (CLOCK_MONOTONIC moved as well). No backend has it."""
