"""Small pure pieces of the env server: host checks, lexical path checks, error mapping."""

from __future__ import annotations

import httpx
import pytest

from inhabit.errors import PathOutsideWorkspace, SandboxError, SandboxLimitExceeded, SandboxNotFound
from inhabit.sandbox.remote import EnvServerUnauthorized, error_from_response
from inhabit.sandbox.server import check_workspace_path, is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.com", ""])
def test_public_hosts(host):
    assert not is_loopback(host)


@pytest.mark.parametrize(
    "path", ["a.txt", "./a/b", "a/../b", "/home/dev/project", "/home/dev/project/x/y", ".", ""]
)
def test_paths_inside(path):
    assert check_workspace_path(path) == path


@pytest.mark.parametrize(
    "path",
    [
        "..",
        "../a",
        "a/../../b",
        "/etc",
        "/home/dev/projectfoo",
        "/workspace/x",
        "/home/dev/project/../x",
        "a\x00b",
    ],
)
def test_paths_outside(path):
    with pytest.raises(PathOutsideWorkspace):
        check_workspace_path(path)


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (401, "unauthorized", EnvServerUnauthorized),
        (404, "sandbox_not_found", SandboxNotFound),
        (404, "snapshot_not_found", SandboxNotFound),
        (404, "file_not_found", FileNotFoundError),
        (400, "is_a_directory", IsADirectoryError),
        (400, "not_a_directory", NotADirectoryError),
        (403, "permission_denied", PermissionError),
        (400, "path_outside_workspace", PathOutsideWorkspace),
        (413, "payload_too_large", SandboxLimitExceeded),
        (429, "too_many_sandboxes", SandboxLimitExceeded),
        (422, "validation", SandboxError),
        (500, "internal", SandboxError),
    ],
)
def test_error_mapping(status, code, expected):
    resp = httpx.Response(status, json={"detail": "what happened", "code": code})
    err = error_from_response(resp)
    assert type(err) is expected
    assert "what happened" in str(err)


def test_error_mapping_survives_a_non_json_body():
    err = error_from_response(httpx.Response(502, text="<html>bad gateway</html>"))
    assert isinstance(err, SandboxError) and "bad gateway" in str(err)


def test_every_mapped_error_answers_its_documented_status():
    """The server's error table and the wire's ERROR_CODES (what clients read) agree, and a
    subclass is never shadowed by its base listed before it."""
    from inhabit.sandbox.server import _ERROR_STATUS, _map_error
    from inhabit.sandbox.server_wire import ERROR_CODES

    for i, (cls, status, code) in enumerate(_ERROR_STATUS):
        assert ERROR_CODES[code] == status, code
        assert not any(issubclass(cls, earlier) for earlier, _, _ in _ERROR_STATUS[:i]), cls
    assert _map_error(SandboxNotFound("gone")).status_code == 404
    assert (
        _map_error(PermissionError(13, "denied")).body
        == b'{"detail":"permission denied in the workspace: denied","code":"permission_denied"}'
    )
    assert _map_error(RuntimeError("boom")).status_code == 500
