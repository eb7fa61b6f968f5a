"""Toxic types with Toxiproxy 2.x names, attributes and semantics.

A toxic is shared by every connection of a proxy; per-connection state (toxicity roll, byte
counters, timers) lives in a `ToxicState` owned by one direction of one connection. Each toxic
transforms a stream of chunks: `pipe()` is an async generator that receives one chunk (data, or
None for end-of-stream) and yields the chunks to pass on; it may sleep (through `state.sleep`,
which ends early when the toxic is removed or updated, so no data is held back) or raise
`CloseLink` / `ResetLink` to end the connection.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, ClassVar


class ToxicError(ValueError):
    """Bad toxic definition; the API turns it into a 400 with this message."""


class CloseLink(Exception):
    """End the connection with a normal close."""


class ResetLink(Exception):
    """End the connection with a TCP RST to both peers (SO_LINGER 0)."""


@dataclass
class Chunk:
    data: bytes | None          # None = end of stream from the source
    ts: float                   # monotonic arrival time at the proxy


@dataclass
class ToxicState:
    """Per-connection, per-direction state of one toxic."""
    active: bool                                  # toxicity roll for this connection
    interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    counter: int = 0                              # limit_data: bytes passed
    next_free: float = 0.0                        # bandwidth: when the link is free again
    timer: asyncio.TimerHandle | None = None      # timeout: close timer

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless interrupted first; True when the full time elapsed."""
        if seconds <= 0:
            return not self.interrupted.is_set()
        try:
            await asyncio.wait_for(self.interrupted.wait(), seconds)
            return False
        except asyncio.TimeoutError:
            return True


class Toxic:
    type: ClassVar[str] = ""
    defaults: ClassVar[dict[str, int]] = {}

    def __init__(self, name: str, stream: str, toxicity: float, attributes: dict[str, int]):
        self.name = name
        self.stream = stream
        self.toxicity = toxicity
        self.attributes = attributes

    # -- hooks -------------------------------------------------------------------------------
    def activate(self, state: ToxicState, close_link) -> None:
        """Called when the toxic starts acting on a connection (timers start here)."""

    def deactivate(self, state: ToxicState) -> None:
        state.interrupted.set()
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None

    async def pipe(self, state: ToxicState, chunk: Chunk) -> AsyncIterator[Chunk]:
        yield chunk

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "stream": self.stream,
                "toxicity": self.toxicity, "attributes": dict(self.attributes)}


class Latency(Toxic):
    """Delay each chunk by latency ± jitter ms, counted from its arrival (pipelined)."""
    type = "latency"
    defaults = {"latency": 0, "jitter": 0}

    async def pipe(self, state, chunk):
        if chunk.data is not None:
            delay = self.attributes["latency"]
            jitter = self.attributes["jitter"]
            if jitter > 0:
                delay += random.uniform(-jitter, jitter)
            await state.sleep(chunk.ts + delay / 1000.0 - time.monotonic())
        yield chunk


class Bandwidth(Toxic):
    """Limit throughput to `rate` KB/s (1 KB = 1000 bytes, as Toxiproxy computes it)."""
    type = "bandwidth"
    defaults = {"rate": 0}

    async def pipe(self, state, chunk):
        rate = self.attributes["rate"] * 1000.0    # bytes per second
        if chunk.data is None or rate <= 0:
            yield chunk
            return
        piece = max(1, int(rate * 0.1))            # release at most 100 ms worth at once
        data = chunk.data
        for off in range(0, len(data), piece):
            part = data[off:off + piece]
            now = time.monotonic()
            # timers overshoot by ~1 ms: keep up to 100 ms of credit so the rate holds,
            # but an idle link does not save up a burst beyond that
            start = state.next_free if state.next_free >= now - 0.1 else now
            state.next_free = start + len(part) / rate
            if not await state.sleep(state.next_free - now):
                yield Chunk(data[off:], chunk.ts)  # interrupted: pass the rest on, drop nothing
                return
            yield Chunk(part, chunk.ts)


class SlowClose(Toxic):
    """Delay the close (end of stream) by `delay` ms."""
    type = "slow_close"
    defaults = {"delay": 0}

    async def pipe(self, state, chunk):
        if chunk.data is None:
            await state.sleep(self.attributes["delay"] / 1000.0)
        yield chunk


class Timeout(Toxic):
    """Drop all data; close the connection after `timeout` ms (0 = never: a black hole)."""
    type = "timeout"
    defaults = {"timeout": 0}

    def activate(self, state, close_link):
        ms = self.attributes["timeout"]
        if ms > 0:
            state.timer = asyncio.get_running_loop().call_later(ms / 1000.0, close_link)

    async def pipe(self, state, chunk):
        if chunk.data is None:
            yield chunk                    # the source closed: let the close through
        return


class ResetPeer(Toxic):
    """On data, wait `timeout` ms, then reset the connection (RST, unsent data discarded)."""
    type = "reset_peer"
    defaults = {"timeout": 0}

    async def pipe(self, state, chunk):
        if await state.sleep(self.attributes["timeout"] / 1000.0):
            raise ResetLink()
        yield chunk                        # removed while waiting: pass the data on


class Slicer(Toxic):
    """Slice chunks into ~average_size ± size_variation bytes, `delay` µs apart."""
    type = "slicer"
    defaults = {"average_size": 0, "size_variation": 0, "delay": 0}

    def validate(self) -> None:
        if self.attributes["average_size"] <= 0:
            raise ToxicError("attributes.average_size must be > 0 for a slicer toxic")
        if self.attributes["size_variation"] >= self.attributes["average_size"]:
            raise ToxicError("attributes.size_variation must be smaller than average_size")

    def _cuts(self, size: int) -> list[int]:
        avg, var = self.attributes["average_size"], self.attributes["size_variation"]
        cuts, start = [], 0
        while size - start > avg + var:
            step = avg + (random.randint(-var, var) if var else 0)
            start += max(1, step)
            cuts.append(start)
        return cuts + [size]

    async def pipe(self, state, chunk):
        if chunk.data is None:
            yield chunk
            return
        prev = 0
        for cut in self._cuts(len(chunk.data)):
            yield Chunk(chunk.data[prev:cut], chunk.ts)
            prev = cut
            if cut < len(chunk.data) and not await state.sleep(self.attributes["delay"] / 1e6):
                yield Chunk(chunk.data[prev:], chunk.ts)
                return


class LimitData(Toxic):
    """Close the connection once `bytes` bytes have passed in this direction."""
    type = "limit_data"
    defaults = {"bytes": 0}

    async def pipe(self, state, chunk):
        if chunk.data is None:
            yield chunk
            return
        left = self.attributes["bytes"] - state.counter
        if left > 0:
            part = chunk.data[:left]
            state.counter += len(part)
            yield Chunk(part, chunk.ts)
        if state.counter >= self.attributes["bytes"]:
            raise CloseLink()


TOXIC_TYPES: dict[str, type[Toxic]] = {
    cls.type: cls for cls in (Latency, Bandwidth, SlowClose, Timeout, ResetPeer, Slicer, LimitData)
}
STREAMS = ("upstream", "downstream")


def _check_attributes(ttype: type[Toxic], raw: Any, base: dict[str, int]) -> dict[str, int]:
    if raw is None:
        return dict(base)
    if not isinstance(raw, dict):
        raise ToxicError("attributes must be a JSON object")
    attrs = dict(base)
    for key, value in raw.items():
        if key not in ttype.defaults:
            raise ToxicError(f"unknown attribute {key!r} for a {ttype.type} toxic "
                             f"(valid: {', '.join(ttype.defaults) or 'none'})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ToxicError(f"attributes.{key} must be an integer, got {value!r}")
        if value < 0:
            raise ToxicError(f"attributes.{key} must be >= 0, got {value}")
        attrs[key] = int(value)
    return attrs


def _check_toxicity(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ToxicError(f"toxicity must be a number between 0 and 1, got {value!r}")
    return float(value)


def build_toxic(body: Any) -> Toxic:
    """A new toxic from a create request body; raises ToxicError (→ 400) on bad input."""
    if not isinstance(body, dict):
        raise ToxicError("request body must be a JSON object")
    stream = body.get("stream", "downstream") or "downstream"
    if stream not in STREAMS:
        raise ToxicError("stream was invalid, can be either upstream or downstream")
    ttype = TOXIC_TYPES.get(body.get("type"))
    if ttype is None:
        raise ToxicError(f"invalid toxic type {body.get('type')!r} "
                         f"(valid: {', '.join(sorted(TOXIC_TYPES))})")
    name = body.get("name") or f"{ttype.type}_{stream}"
    if not isinstance(name, str):
        raise ToxicError("name must be a string")
    toxic = ttype(name, stream, _check_toxicity(body.get("toxicity", 1.0)),
                  _check_attributes(ttype, body.get("attributes"), ttype.defaults))
    if hasattr(toxic, "validate"):
        toxic.validate()
    return toxic


def updated_toxic(old: Toxic, body: Any) -> Toxic:
    """A copy of `old` with the attributes/toxicity of an update body merged in."""
    if not isinstance(body, dict):
        raise ToxicError("request body must be a JSON object")
    ttype = type(old)
    new = ttype(old.name, old.stream,
                _check_toxicity(body["toxicity"]) if "toxicity" in body else old.toxicity,
                _check_attributes(ttype, body.get("attributes"), old.attributes))
    if hasattr(new, "validate"):
        new.validate()
    return new
