"""pytest plugin that inhabit loads (`-p`) into every test run it reads results from.

This file is copied into the sandbox's private /tmp and imported by pytest there; it depends on
nothing but the standard library and pytest. It is never imported by inhabit itself.

What it does:
  * At import (before any conftest or test module is imported) reads `cfg.json` beside this
    file, holding a random HMAC key, and deletes it. The report and seal live in this file's
    directory too, so no path or key appears in argv or the environment, and once tests run the
    key is nowhere but in this module's memory. In pytest-xdist workers, which import this
    plugin after the main process deleted the file, it only tags test cases.
  * Points pytest's junitxml plugin at `report.xml` here (`config.option.xmlpath`) and tags
    every test case with its exact node id (`inhabit_nodeid` property).
  * Records each test's outcome itself from pytest's own reports, and at unconfigure (after the
    XML is written) writes `seal.json`: the SHA-256 of the XML bytes, those outcomes, and an HMAC
    over both under the key. inhabit accepts the XML only if the seal verifies and the passed
    sets agree.

What it does NOT protect against: code under test runs in this same process and can, with
deliberate effort, find this module in sys.modules and read the key or rewrite pytest's report
objects before either channel sees them. The seal catches the plain forgeries (writing the XML
from a test, at import or at exit; patching the junitxml plugin; deleting the report).
"""

import hashlib
import hmac
import json
import os

import pytest

_DIR = os.path.dirname(os.path.abspath(__file__))


def _take_key():
    path = os.path.join(_DIR, "cfg.json")
    try:
        with open(path) as f:
            key = json.load(f)["key"]
        os.remove(path)
        return bytes.fromhex(key)
    except (OSError, ValueError, KeyError):
        return b""


_KEY = _take_key()
_XML = os.path.join(_DIR, "report.xml") if _KEY else None
_SEAL = os.path.join(_DIR, "seal.json") if _KEY else None
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
