"""Per-test outcomes from a pytest JUnit XML report, keyed by pytest node id.

Outcomes are read from the XML, never from console text. Each `<testcase>` becomes a node id:
  * preferably from its `inhabit_nodeid` property, which inhabit's seal plugin attaches to every
    collected item (exact, including classes and parametrized ids), else
  * by inverting pytest's `classname`/`name` mangling: classname is the file path with '/' turned
    into '.' and '.py' dropped, followed by '.'-joined class names; name is the function name plus
    any `[params]`. The file/class boundary is ambiguous in general, so it is resolved against the
    set of test files that are known to exist (longest dotted file prefix wins).

pytest's own INTERNALERROR (classname "pytest", name "internal") and the nameless testcase an
interrupted session leaves are reported as `internal_error` and `interrupted`, never as tests.
A collection error is a testcase with an empty classname whose name is the dotted file path; it is
reported in `collection_errors` (file paths) and every required test of that file is an error.
One node id may appear in several testcases (a call failure plus a teardown error); the worst
outcome wins. Outcomes: "passed", "failed", "error", "skipped" (pytest skip or xfail).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field

from inhabit.errors import GradingError

NODEID_PROPERTY = "inhabit_nodeid"
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


@dataclass
class JUnitReport:
    """What a report says: outcome and short message per node id, plus collection errors."""

    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    collection_errors: dict[str, str] = field(default_factory=dict)
    """File path (or dotted name when the file is unknown) -> error message."""
    internal_error: str | None = None
    """pytest's INTERNALERROR (e.g. SystemExit raised while importing a test module)."""
    interrupted: bool = False
    """A nameless testcase: pytest wrote the report of a session that was cut short (pytest.exit)."""
    inferred: bool = False
    """True when some node id was reconstructed from classname/name (no node-id property)."""


def worst(a: str | None, b: str) -> str:
    """Combine two outcomes of the same test: the worse one wins."""
    if a is None:
        return b
    return a if _RANK.get(a, 3) >= _RANK.get(b, 3) else b


def _dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def node_id_from_junit(classname: str, name: str, known_files: Iterable[str] = ()) -> str:
    """Invert pytest's junit mangling, resolving the file/class boundary with `known_files`."""
    if not classname:
        return name
    best = None
    for f in known_files:
        d = _dotted(f)
        if (classname == d or classname.startswith(d + ".")) and (
            best is None or len(d) > len(_dotted(best))
        ):
            best = f
    if best is not None:
        rest = classname[len(_dotted(best)) :].lstrip(".")
        classes = rest.split(".") if rest else []
    else:
        # Unknown file: assume classes start with an upper-case segment (pytest's default Test*).
        parts = classname.split(".")
        cut = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
        best = "/".join(parts[:cut]) + ".py"
        classes = parts[cut:]
    return "::".join([best, *classes, name])


def _outcome(case: ET.Element) -> tuple[str, str]:
    for child in case:
        tag = child.tag
        if tag in ("failure", "error", "skipped"):
            outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            return outcome, (child.get("message") or "").strip()
    return "passed", ""


def parse_junit(xml_bytes: bytes, known_files: Iterable[str] = ()) -> JUnitReport:
    """Parse a JUnit XML document (xunit1 or xunit2, one or several suites)."""
    known = list(known_files)
    try:
        root = ET.fromstring(xml_bytes)
    except ET.ParseError as e:
        raise GradingError(f"the JUnit XML report is not well-formed: {e}") from e
    report = JUnitReport()
    for case in root.iter("testcase"):
        classname = case.get("classname") or ""
        name = case.get("name") or ""
        outcome, message = _outcome(case)
        if classname == "pytest" and name == "internal":
            report.internal_error = message or "internal error"
            continue
        node_id = None
        for prop in case.iter("property"):
            if prop.get("name") == NODEID_PROPERTY:
                node_id = prop.get("value")
        if node_id is None and not classname and outcome in ("error", "skipped"):
            # A collection failure (or a skipped module): the name is the dotted file path.
            files = [f for f in known if _dotted(f) == name]
            key = files[0] if files else name
            if outcome == "error":
                # pytest's message is only "collection failure"; the cause (the exception line a
                # user and `inhabit.grading.diagnose` need) is in the element's text, so keep its tail.
                text = "".join(child.text or "" for child in case if child.tag == "error").strip()
                message = message or "collection failure"
                report.collection_errors[key] = f"{message}\n{text[-2000:]}" if text else message
            continue
        if node_id is None and not name:
            report.interrupted = True
            continue
        if node_id is None:
            node_id = node_id_from_junit(classname, name, known)
            report.inferred = True
        report.outcomes[node_id] = worst(report.outcomes.get(node_id), outcome)
        if message and node_id not in report.messages:
            report.messages[node_id] = message[:500]
    return report
