"""A job's requirement specifiers (`trainer.requirements`, `trainer.requirements_file`, a launcher's pins):
parsed, refused where they cannot be reproduced offline, and normalised so equal lists hash equally.

Only PEP 508 specifiers by name are taken (`omegaconf==2.3.0`, `pkg[extra]>=1; python_version>='3.10'`):
the wheels are fetched on the host and installed from the wheelhouse with `--no-index`, so options that
point pip elsewhere (`-e`, `--index-url`, `-f`), direct URLs and paths would be silently ignored or fail
inside the image; they are refused with the fix instead. `-r other.txt` is followed (relative to the file).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

_NO_DIRECT = ("a URL or path cannot be fetched into the offline wheelhouse: publish the package to your index "
              "and name it (name==version), or add its directory to trainer.workdir and import it from there")
_OPTION_FIX = {
    ("-e", "--editable"): "an editable install needs the source at build time: put the package in trainer.workdir "
                          "(the job's cwd is on its path) or name a released version",
    ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--no-index"):
        "the index is the host's pip configuration (pip.conf, PIP_INDEX_URL), which fetches the wheels: set it there",
    ("--hash", "--require-hashes"): "hashes are not checked here (versions are pinned by name==version): remove them",
    ("-c", "--constraint"): "constraints files are not read: pin the version in the requirement itself",
}


@dataclass
class Refused(Exception):
    """A requirement that cannot be used; `line` is 1-based within its file (None: a list entry)."""
    line: int | None
    why: str

    def __str__(self) -> str:
        return self.why


def normalise(spec: str) -> str:
    """One specifier in canonical form (name lower-case, dashes, no spaces); raises Refused."""
    text = spec.strip()
    if text.startswith("-"):
        opt = text.split()[0].split("=")[0]
        fix = next((f for opts, f in _OPTION_FIX.items() if opt in opts),
                   "only requirement specifiers by name are read (e.g. omegaconf==2.3.0)")
        raise Refused(None, f"option {opt!r} is not supported: {fix}")
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        if "/" in text or text.startswith("."):
            raise Refused(None, f"{text!r}: {_NO_DIRECT}") from None
        raise Refused(None, f"{text!r} is not a requirement specifier ({str(exc).splitlines()[0]}); write e.g. omegaconf==2.3.0 "
                            f"or 'omegaconf>=2.3'") from None
    if req.url:
        raise Refused(None, f"{text!r}: {_NO_DIRECT}")
    req.name = canonicalize_name(req.name)
    req.extras = {canonicalize_name(e) for e in req.extras}
    return str(req)


def parse_file(path: Path, _seen: tuple[Path, ...] = ()) -> list[str]:
    """A requirements file's specifiers; comments, blank lines and `\\` continuations as pip reads them.
    Raises Refused with the line, or OSError/UnicodeDecodeError when the file cannot be read."""
    path = path.resolve()
    if path in _seen:
        raise Refused(None, f"{path} includes itself through -r")
    out: list[str] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        start, text = i + 1, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):   # pip's line continuation
            i += 1
            text = text.rstrip()[:-1] + lines[i]
        i += 1
        text = text.split(" #")[0].split("\t#")[0].strip()
        if not text or text.startswith("#"):
            continue
        words = text.split()
        if words[0] in ("-r", "--requirement") and len(words) == 2:
            try:
                out += parse_file(path.parent / words[1], (*_seen, path))
            except OSError as exc:
                raise Refused(start, f"-r {words[1]}: cannot read it ({exc.strerror or exc})") from None
            continue
        try:
            out.append(normalise(text))
        except Refused as exc:
            raise Refused(exc.line or start, exc.why) from None
    return out


def merged(*lists: list[str]) -> list[str]:
    """Normalised, duplicates dropped, sorted: the order a user writes them in does not change the hash."""
    return sorted({normalise(s) for lst in lists for s in lst})


def name_of(spec: str) -> str:
    return canonicalize_name(Requirement(spec).name)
