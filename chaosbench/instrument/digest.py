"""Parameters as raw bytes: a digest to compare replicas across ranks, and the silent bit flip that
makes them differ (corrupt_replica). torch is imported inside the functions; numpy is not needed.
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import random
from collections.abc import Mapping


def named_tensors(obj) -> list[tuple[str, object]]:
    """(name, tensor) of a module (named_parameters order) or of a dict of tensors (its order)."""
    import torch
    if isinstance(obj, Mapping):
        out = []
        for k, v in obj.items():
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"cb.digest: value of key {k!r} is {type(v).__name__}, not a tensor; "
                                "pass model.state_dict() or the model itself")
            out.append((str(k), v))
        return out
    if hasattr(obj, "named_parameters"):
        return list(obj.named_parameters())
    raise TypeError(f"cb.digest takes a torch.nn.Module or a dict of tensors, not {type(obj).__name__}")


def digest(obj) -> str:
    """blake2b-128 hex over every parameter's bytes in named_parameters order (or a state_dict's tensors
    in its order). Equal on every data-parallel replica; one flipped bit changes it. The bytes only:
    names, shapes and dtypes are not hashed, so a DDP wrapper and its module digest alike."""
    import torch
    h = hashlib.blake2b(digest_size=16)
    for _, t in named_tensors(obj):
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        n = raw.numel()
        if n:   # hash the tensor's memory in place: no copy through numpy or tolist()
            h.update((ctypes.c_char * n).from_address(raw.data_ptr()))
    return h.hexdigest()


def _int_dtype(torch, dtype):
    return {torch.float32: torch.int32, torch.float64: torch.int64,
            torch.float16: torch.int16, torch.bfloat16: torch.int16}.get(dtype)


def _as_float(torch, bits: int, width: int, itype, ftype) -> float:
    signed = bits - (1 << width) if bits >> (width - 1) else bits
    return float(torch.tensor(signed, dtype=itype).view(ftype).item())


def _unravel(flat: int, shape) -> tuple[int, ...]:
    idx = []
    for size in reversed(tuple(shape)):
        flat, r = divmod(flat, size)
        idx.append(r)
    return tuple(reversed(idx))


def flip_bits(named: list[tuple[str, object]], bits: int, seed: int, what: str = "") -> str:
    """Flip `bits` distinct bits of one element of one of `named`'s float tensors, in place. The element
    is drawn uniformly over all elements with random.Random(seed), the bits uniformly among the
    element's bits, except that a bit whose flip would make the value NaN or inf is skipped: a
    non-finite value is a loud error, the fault is the silent kind. Returns the detail string;
    raises ValueError when nothing can be flipped (no float tensor, or bits larger than the width)."""
    import torch
    cands = [(n, t) for n, t in named if _int_dtype(torch, t.dtype) is not None and t.numel() > 0]
    if not cands:
        raise ValueError("no float32/float64/float16/bfloat16 tensor with elements to corrupt")
    rng = random.Random(seed)
    pick = rng.randrange(sum(t.numel() for _, t in cands))
    for name, t in cands:
        if pick < t.numel():
            break
        pick -= t.numel()
    itype, width = _int_dtype(torch, t.dtype), t.element_size() * 8
    if not 1 <= bits <= width:
        raise ValueError(f"bits={bits}: a {str(t.dtype).replace('torch.', '')} element has {width} bits")
    idx = _unravel(pick, t.shape)
    with torch.no_grad():
        elem = t.detach()[idx].view(itype)          # a 0-d integer view of the element's memory
        old_bits = int(elem.item()) & ((1 << width) - 1)
        old = _as_float(torch, old_bits, width, itype, t.dtype)
        order = list(range(width))
        rng.shuffle(order)
        new_bits, chosen = old_bits, []
        for pos in order:
            if len(chosen) == bits:
                break
            trial = new_bits ^ (1 << pos)
            if math.isfinite(_as_float(torch, trial, width, itype, t.dtype)):
                new_bits, chosen = trial, chosen + [pos]
        if len(chosen) < bits:
            raise ValueError(f"no {bits} bits of {name}{list(idx)} flip to a finite value")
        elem.fill_(new_bits - (1 << width) if new_bits >> (width - 1) else new_bits)
    new = _as_float(torch, new_bits, width, itype, t.dtype)
    digits = {16: 5, 32: 9, 64: 17}[width]   # enough to read the exact value back in its dtype
    return (f"flipped bit{'s' if bits > 1 else ''} {sorted(chosen)} of {what}{name}{list(idx)} "
            f"({str(t.dtype).replace('torch.', '')}): {old:.{digits}g} -> {new:.{digits}g}")
