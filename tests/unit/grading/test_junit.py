"""JUnit XML -> pytest node ids and outcomes, checked against reports that real pytest writes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from inhabit.errors import GradingError
from inhabit.grading.junit import node_id_from_junit, parse_junit

TESTS = {
    "tests/test_mix.py": """
import pytest

def test_pass():
    pass

def test_fail():
    assert 1 == 2

@pytest.mark.skip(reason="no")
def test_skip():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert 0

@pytest.mark.parametrize("x", [1, "a.b", "c::d"])
def test_param(x):
    assert x != "a.b"

class TestGroup:
    def test_in_class(self):
        pass

    class TestInner:
        def test_nested(self):
            assert False

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

def test_setup_error(broken):
    pass

@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_fail_and_teardown_error(bad_teardown):
    assert False
""",
    "tests/sub.dir/test_dotted.py": "def test_x():\n    pass\n",
    "tests/test_broken.py": "import no_such_module_here\n\ndef test_never():\n    pass\n",
}

EXPECTED = {
    "tests/test_mix.py::test_pass": "passed",
    "tests/test_mix.py::test_fail": "failed",
    "tests/test_mix.py::test_skip": "skipped",
    "tests/test_mix.py::test_xfail": "skipped",
    "tests/test_mix.py::test_param[1]": "passed",
    "tests/test_mix.py::test_param[a.b]": "failed",
    "tests/test_mix.py::test_param[c::d]": "passed",
    "tests/test_mix.py::TestGroup::test_in_class": "passed",
    "tests/test_mix.py::TestGroup::TestInner::test_nested": "failed",
    "tests/test_mix.py::test_setup_error": "error",
    "tests/test_mix.py::test_fail_and_teardown_error": "error",
    "tests/sub.dir/test_dotted.py::test_x": "passed",
}


@pytest.fixture(scope="module")
def real_report(tmp_path_factory) -> tuple[bytes, Path]:
    root = tmp_path_factory.mktemp("junit")
    for rel, text in TESTS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    xml = root / "report.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
           "-c", "/dev/null", "--rootdir", str(root), f"--junitxml={xml}", "tests"]  # fmt: skip
    subprocess.run(
        cmd, cwd=root, capture_output=True, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, check=False
    )
    return xml.read_bytes(), root


def test_classname_mapping_recovers_node_ids_from_real_pytest(real_report):
    xml, _ = real_report
    report = parse_junit(xml, known_files=TESTS.keys())
    assert report.inferred
    assert report.outcomes == EXPECTED
    assert list(report.collection_errors) == ["tests/test_broken.py"]
    message = report.collection_errors["tests/test_broken.py"]
    assert message.startswith("collection failure\n") and "Error" in message  # with the cause


def test_nodeid_property_wins_over_classname(real_report):
    xml, _ = real_report
    # Give every testcase a property claiming a different node id: the property must be used.
    tagged = re.sub(
        rb'<testcase classname="([^"]*)" name="([^"]*)"([^>]*?)(/?)>',
        lambda m: (
            b'<testcase classname="' + m[1] + b'" name="' + m[2] + b'"' + m[3] + b">"
            b'<properties><property name="inhabit_nodeid" value="X::'
            + m[2]
            + b'"/></properties>'
            + (b"</testcase>" if m[4] else b"")
        ),
        xml,
    )
    report = parse_junit(tagged, known_files=TESTS.keys())
    assert "X::test_pass" in report.outcomes
    assert not any(k.startswith("tests/test_mix.py") for k in report.outcomes)


def test_messages_are_kept_short(real_report):
    report = parse_junit(real_report[0], known_files=TESTS.keys())
    assert "assert 1 == 2" in report.messages["tests/test_mix.py::test_fail"]
    assert all(len(m) <= 500 for m in report.messages.values())


@pytest.mark.parametrize(
    ("classname", "name", "known", "want"),
    [
        ("tests.test_a", "test_x", ["tests/test_a.py"], "tests/test_a.py::test_x"),
        ("tests.test_a.TestC", "test_x[1-2]", ["tests/test_a.py"], "tests/test_a.py::TestC::test_x[1-2]"),
        ("tests.test_a.TestC", "test_x", [], "tests/test_a.py::TestC::test_x"),
        ("a.b.test_c", "t", ["a/b.py", "a/b/test_c.py"], "a/b/test_c.py::t"),
        ("test_top", "t", [], "test_top.py::t"),
    ],
)
def test_node_id_from_junit(classname, name, known, want):
    assert node_id_from_junit(classname, name, known) == want


def test_malformed_xml_is_a_grading_error():
    with pytest.raises(GradingError, match="well-formed"):
        parse_junit(b"<testsuite><testcase")


def test_internal_error_and_interrupted_sessions_are_not_tests():
    xml = (
        b'<testsuites><testsuite><testcase classname="pytest" name="internal">'
        b'<error message="internal error">SystemExit: 0</error></testcase>'
        b'<testcase time="0.0"/></testsuite></testsuites>'
    )
    report = parse_junit(xml)
    assert report.outcomes == {}
    assert report.internal_error == "internal error"
    assert report.interrupted
