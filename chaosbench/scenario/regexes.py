"""Regexes a scenario gives (expect.log_regex, trainer.progress.regex) run over every log or output
line of a run; one that backtracks exponentially (`(a+)+$` on a long line of a's) would hang the
harness or the node watcher. Python's `re` has no time limit, so such a pattern is refused when the
scenario loads, by its structure:

- a variable-length repeat inside a repeat that can run more than MANY times (`(a+)+`, `(\\w*,)*`,
  `(a{1,9})+`, `(.*x){20}`): the inner and outer repeats can split one stretch of text in
  exponentially many ways;
- an alternation inside such a repeat whose branches can begin with the same character (`(a|aa)+`,
  `(\\d|\\d\\d)*`), or that may match nothing: the same ambiguity through the branches.

A fixed count inside a repeat (`(\\d{4}-)+`), a few repeats of a variable one (`(\\d+\\.){3}`), and
possessive or atomic forms (`(a+)++`, `(?>a+)+`) are accepted. The rule is conservative about the
alternation (`\\d`, `\\w`, `.` and negated sets are taken to overlap anything).
"""
from __future__ import annotations

try:
    from re import _constants as C, _parser as sre   # Python 3.11+
except ImportError:   # pragma: no cover
    import sre_constants as C   # type: ignore[no-redef]
    import sre_parse as sre     # type: ignore[no-redef]

MANY = 10   # an outer repeat bounded by this many is polynomial at worst
ANY = None  # a first-character set that may hold any character
FIX = ("rewrite it without a repeat inside a repeat (e.g. '(a+)+' -> 'a+', '(\\w+\\s?)+' -> '[\\w\\s]+') "
       "or make the inner part possessive ('(a++)+')")


def catastrophic(pattern: str) -> str | None:
    """Why `pattern` can backtrack exponentially (with the fix), or None. The pattern compiles."""
    return _walk(sre.parse(pattern), outer=False)


def _walk(items, outer: bool) -> str | None:
    for op, av in items:
        why = None
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = av
            if outer and lo != hi and _nonempty(sub):
                why = f"a repeated part inside a repeat can backtrack exponentially on a line that does not match; {FIX}"
            else:
                why = _walk(sub, outer or hi > MANY)
        elif op == C.BRANCH:
            branches = av[1]
            optional = outer and len({_nonempty(b) for b in branches}) > 1   # `(a|aa)+` parses as a(|a)
            if optional:
                why = f"an optional part inside a repeat can backtrack exponentially on a line that does not match; {FIX}"
            elif outer and _overlap([_first(b) for b in branches]):
                why = ("an alternation inside a repeat has branches that can start with the same character, which "
                       "can backtrack exponentially on a line that does not match; make the branches start "
                       "differently or use one character class (e.g. '(\\d|\\d\\d)+' -> '\\d+')")
            else:
                why = next((w for b in branches if (w := _walk(b, outer))), None)
        elif op == C.SUBPATTERN:
            why = _walk(av[-1], outer)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            why = _walk(av[1], outer)
        elif op == C.GROUPREF_EXISTS:
            why = next((w for b in av[1:] if b is not None and (w := _walk(b, outer))), None)
        # POSSESSIVE_REPEAT and ATOMIC_GROUP never backtrack into themselves: nothing to check inside
        if why:
            return why
    return None


def _nonempty(items) -> bool:
    """True when the sub-pattern can consume text (a repeat of pure anchors cannot split anything)."""
    return any(op not in (C.AT, C.ASSERT, C.ASSERT_NOT) for op, _ in items)


def _first(items) -> set | None:
    """The characters a sub-pattern can begin with (ANY when it cannot be told cheaply)."""
    out: set = set()
    for op, av in items:
        if op == C.LITERAL:
            return out | {av}
        if op == C.IN and all(o in (C.LITERAL, C.RANGE) for o, _ in av):
            for o, a in av:
                if o == C.LITERAL:
                    out.add(a)
                elif a[1] - a[0] > 256:
                    return ANY
                else:
                    out.update(range(a[0], a[1] + 1))
            return out
        if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            continue
        if op == C.SUBPATTERN:
            inner = _first(av[-1])
            if inner is ANY:
                return ANY
            out |= inner
            if _nonempty(av[-1]):
                return out
            continue
        return ANY
    return out


def _overlap(sets: list) -> bool:
    seen: set = set()
    for s in sets:
        if s is ANY:
            return len(sets) > 1
        if seen & s:
            return True
        seen |= s
    return False
