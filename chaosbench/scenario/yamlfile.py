"""Reading a scenario file's YAML: one pass that yields the data and each key's line, and refuses
what YAML would otherwise accept quietly.

- Duplicate keys: YAML keeps the last one, so a second `recovered_from` would silently replace the
  first. Refused with both lines.
- Anchors and aliases (`&name`, `*name`): refused altogether. A scenario is short enough to write
  out, and an alias can expand exponentially (a "billion laughs" file took 12 s and 2.4 GB before
  failing with a traceback) or hide a structure where a scalar belongs (`where: {tier: *big}`).
- `1e3` is read as a number (YAML 1.1 would make it the string "1e3"), as the trainer's config does,
  so a count written that way meets the same range checks as any other number.
"""
from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.events import AliasEvent

FLOAT_E = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class YamlRefused(ValueError):
    """The text is YAML this harness does not take; `problems` as (line, key path or None, message)."""

    def __init__(self, problems: list[tuple[int | None, tuple | None, str]]):
        super().__init__("; ".join(m for _, _, m in problems))
        self.problems = problems


class _Loader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, AliasEvent) or getattr(event, "anchor", None):
            sign = f"*{event.anchor}" if isinstance(event, AliasEvent) else f"&{event.anchor}"
            raise YamlRefused([(event.start_mark.line + 1, None,
                                f"YAML anchors and aliases are not accepted in a scenario file (found '{sign}'): "
                                "write the value out where it is used")])
        return super().compose_node(parent, index)


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT_E, list("-+0123456789"))


def read(text: str) -> tuple[Any, dict[tuple, int]]:
    """(data, {key path: line}); raises YamlRefused, or yaml.YAMLError for text that is no YAML."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YamlRefused([(None, None, "the YAML nests too deeply to be a scenario; flatten it")]) from None
        if node is None:
            return None, {}
        lines: dict[tuple, int] = {}
        dupes: list = []
        _walk(node, (), lines, dupes)
        if dupes:
            raise YamlRefused(dupes)
        return loader.construct_document(node), lines
    finally:
        loader.dispose()


def _walk(node: yaml.Node, path: tuple, lines: dict, dupes: list) -> None:
    """Map each key path, e.g. ('faults', 0, 'kill_node', 'node'), to its 1-based line; note duplicates."""
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for k, v in node.value:
            key, line = k.value, k.start_mark.line + 1
            if isinstance(k, yaml.ScalarNode) and key in first:
                dupes.append((line, path + (key,), f"duplicate key '{key}' (first on line {first[key]}); YAML would keep "
                                    f"only this one and drop the first without a word: keep one of them"))
            first.setdefault(key, line)
            lines[path + (key,)] = line
            _walk(v, path + (key,), lines, dupes)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            lines[path + (i,)] = v.start_mark.line + 1
            _walk(v, path + (i,), lines, dupes)
