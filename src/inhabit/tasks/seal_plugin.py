"""pytest plugin that inhabit loads (`-p`) into every test run it reads results from.

This file is copied into the sandbox's private /tmp and imported by pytest there; it depends on
nothing but the standard library and pytest. It is never imported by inhabit itself.

What it does:
  * Reads one JSON line from stdin at import time (before any conftest or test module is
    imported): the JUnit XML path, the seal path and a random key. So the report path appears in
    neither argv nor the environment, and the key is nowhere but in this module's memory.
  * Points pytest's junitxml plugin at that path (`config.option.xmlpath`) and tags every test
    case with its exact node id (`inhabit_nodeid` property).
  * Records each test's outcome itself from pytest's own reports, and at unconfigure (after the
    XML is written) writes a seal: the SHA-256 of the XML bytes, those outcomes, and an HMAC over
    both under the key. inhabit accepts the XML only if the seal verifies and the passed sets agree.

What it does NOT protect against: code under test runs in this same process and can, with
deliberate effort, find this module in sys.modules and read the key or rewrite pytest's report
objects before either channel sees them. The seal catches the plain forgeries (writing the XML
from a test, at import or at exit; patching the junitxml plugin; deleting the report).
"""

import hashlib
import hmac
import json
import os
import sys

import pytest

_CFG = json.loads(sys.stdin.readline() or "{}")
_KEY = bytes.fromhex(_CFG.pop("key", ""))
_XML = _CFG.get("xml")
_SEAL = _CFG.get("seal")
_OUTCOMES = {}
_COLLECT_ERRORS = []
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _note(node_id, outcome):
    old = _OUTCOMES.get(node_id)
    if old is None or _RANK[outcome] > _RANK[old]:
        _OUTCOMES[node_id] = outcome


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if _XML:
        config.option.xmlpath = _XML
        config.option.junitprefix = None


def pytest_collection_modifyitems(items):
    for item in items:
        item.user_properties.append(("inhabit_nodeid", item.nodeid))


def pytest_runtest_logreport(report):
    if report.when == "call":
        _note(report.nodeid, "passed" if report.passed else "skipped" if report.skipped else "failed")
    elif report.failed:
        _note(report.nodeid, "error")
    elif report.skipped:
        _note(report.nodeid, "skipped")


def pytest_collectreport(report):
    if report.failed:
        _COLLECT_ERRORS.append(report.nodeid)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if not _SEAL or not _KEY:
        return
    try:
        with open(_XML, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        digest = ""
    body = json.dumps(
        {"xml_sha256": digest, "outcomes": _OUTCOMES, "collection_errors": _COLLECT_ERRORS},
        sort_keys=True,
    )
    mac = hmac.new(_KEY, body.encode(), hashlib.sha256).hexdigest()
    fd = os.open(_SEAL, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"body": body, "mac": mac}))
