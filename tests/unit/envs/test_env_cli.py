"""`inhabit env lock|build|list|prune` end to end (offline), and bad input as one `error:` line."""

from __future__ import annotations

import pytest

from inhabit.cli import main


def _run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


def test_lock_build_reuse_list_prune(dep_task, wheelhouse, capsys, tmp_path, monkeypatch):
    root = dep_task(with_env=False)
    monkeypatch.setenv("INHABIT_CACHE_DIR", str(tmp_path / "own-cache"))  # an empty store
    code, out, err = _run(capsys, "env", "lock", str(root), "--wheelhouse", str(wheelhouse))
    assert code == 0, err
    assert "locked 1 requirement(s)" in out and "[environment]" in (root / "task.toml").read_text()
    code, out, err = _run(capsys, "env", "build", str(root), "--wheelhouse", str(wheelhouse))
    assert code == 0 and " built in " in out, err
    code, out, _ = _run(capsys, "env", "build", str(root))
    assert code == 0 and " reused in 0.00s" in out
    eid = out.split()[1]
    code, out, _ = _run(capsys, "env", "list")
    assert code == 0 and eid in out and "1 environment(s)" in out
    code, out, _ = _run(capsys, "env", "prune", "--keep", str(root.parent))
    assert code == 0 and "0 environment(s) removed, 1 kept" in out
    code, out, _ = _run(capsys, "env", "prune")
    assert code == 0 and f"removed {eid}" in out


def test_bad_input_is_one_error_line(dep_task, wheelhouse, tmp_path, capsys):
    root = dep_task(with_env=False)
    code, _, err = _run(capsys, "env", "lock", str(root), "--extra", "docs", "--wheelhouse", str(wheelhouse))
    assert code == 2 and err.startswith("error: ") and "declares no extra 'docs'" in err
    (root / "workspace" / "pyproject.toml").write_text(
        '[project]\nname = "q"\ndependencies = ["nosuch-zz"]\n'
    )
    code, _, err = _run(capsys, "env", "lock", str(root), "--wheelhouse", str(wheelhouse))
    assert code == 2 and "'nosuch-zz' (from pyproject.toml [project] dependencies) does not resolve" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_task_check_builds_a_missing_environment_from_a_wheelhouse(
    dep_task, wheelhouse, tmp_path, monkeypatch
):
    import json

    from typer.testing import CliRunner

    from inhabit.cli import app

    root = dep_task()
    monkeypatch.setenv("INHABIT_CACHE_DIR", str(tmp_path / "empty-cache"))  # another machine's store
    monkeypatch.delenv("INHABIT_WHEELHOUSE")
    result = CliRunner().invoke(
        app, ["tasks", "check", str(root), "--json", "--backend", "process", "--wheelhouse", str(wheelhouse)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["valid"] and any(
        n.startswith("environment sha256:") and "(built)" in n for n in report["notes"]
    )


def test_a_package_without_a_wheel_is_one_line_and_allow_build_opts_in(dep_task, tmp_path, capsys):
    from env_fixtures import write_sdist

    root = dep_task(with_env=False)
    (root / "workspace" / "pyproject.toml").write_text('[project]\nname = "q"\ndependencies = ["sdonly"]\n')
    mark = tmp_path / "build-ran"
    sdists = write_sdist(tmp_path / "sdists", mark).parent
    code, _, err = _run(capsys, "env", "lock", str(root), "--wheelhouse", str(sdists))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("error: sdonly (required by pyproject.toml [project] dependencies) has no wheel")
    assert not mark.exists()
    code, _, err = _run(capsys, "env", "lock", str(root), "--wheelhouse", str(sdists), "--allow-build")
    assert code == 0 and mark.exists(), err
    mark.unlink()
    code, out, err = _run(capsys, "env", "build", str(root), "--wheelhouse", str(sdists))
    assert code == 1 and "has no wheel" in err and not mark.exists()
    code, out, err = _run(capsys, "env", "build", str(root), "--wheelhouse", str(sdists), "--allow-build")
    assert code == 0 and " built in " in out and mark.exists(), err
