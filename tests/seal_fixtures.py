"""pytest with grading's seal plugin, in a subprocess, on a small workspace written for the test.

The grading tests that need the plugin's own verdict (what its checks found, the sealed outcomes)
run it here the way a sandboxed test run loads it: the plugin copied under a module name into a
folder of its own with its cfg.json beside it, that folder (and any "installed" code, outside the
workspace) on PYTHONPATH, pytest started in the workspace with `-p <module>`:

    from seal_fixtures import sealed_pytest

    run = sealed_pytest(tmp_path, {"calc.py": CODE, "tests/test_calc.py": TEST},
                        test_files=["tests/test_calc.py"], grading=True)
    assert run.kinds == {"answer_key"}, run.tampering

`sealed_pytest`'s keywords say which of grading's settings the run takes (cfg.json's test files,
`grading` and `hide`, the original project's functions; the assertion-pass hook on the command
line). It returns a `SealedRun`: the sealed body (verified to parse, not to be signed), the
console output, the exit status, the wall time and the two folders.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SEAL = Path(__file__).resolve().parents[1] / "src" / "inhabit" / "grading" / "seal_plugin.py"


@dataclass
class SealedRun:
    body: dict  # the sealed body: "outcomes", "tampering" (what the checks found), ...
    output: str  # pytest's stdout and stderr
    exit_code: int
    duration: float  # wall seconds of the pytest process
    work: Path  # the workspace pytest ran in
    seal_dir: Path  # the plugin's folder: cfg.json, seal.json, report.xml

    @property
    def tampering(self) -> list[str]:
        return self.body["tampering"]

    @property
    def kinds(self) -> set[str]:
        """The kinds of the findings (`answer_key`, `equal`, `patched`, ...)."""
        return {t.split(":", 1)[0] for t in self.tampering}

    @property
    def xml(self) -> str:
        return (self.seal_dir / "report.xml").read_text()


def _write(folder: Path, files: Mapping[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def sealed_pytest(
    tmp_path: Path,
    files: Mapping[str, str],
    *,
    lib: Mapping[str, str] | None = None,
    key: str = "ab" * 16,
    test_files: Sequence[str] | None = None,
    grading: bool = False,
    hide: bool = True,
    project_functions: Mapping | None = None,
    plugins: Sequence[str] = (),
    plugins_before_seal: int = 0,
    pass_hook: bool = True,
    targets: Sequence[str] = (),
    module: str = "inhabit_seal_x",
    dont_write_bytecode: bool = False,
) -> SealedRun:
    """pytest over `files` (the workspace, relative path -> text) with the seal plugin loaded.

    `lib`: installed code, on PYTHONPATH outside the workspace (as site-packages is). cfg.json
    holds `key`, `test_files` when given (the files grading trusts), `grading` and `hide` when
    `grading`, and `project_functions` when given. `plugins`: more `-p` names, the first
    `plugins_before_seal` of them loaded before the seal plugin. `pass_hook`: pytest's
    assertion-pass hook on, as grading runs it (the plugin then judges every passing `==`).
    `targets`: what pytest collects (all of the workspace when empty)."""
    work, seal_dir, lib_dir = tmp_path / "work", tmp_path / "seal", tmp_path / "lib"
    _write(work, files)
    _write(lib_dir, lib or {})
    seal_dir.mkdir()
    (seal_dir / f"{module}.py").write_text(SEAL.read_text())
    cfg: dict = {"key": key}
    if test_files is not None:
        cfg["test_files"] = list(test_files)
    if grading:
        cfg |= {"grading": True, "hide": hide}
    if project_functions is not None:
        cfg["project_functions"] = dict(project_functions)
    (seal_dir / "cfg.json").write_text(json.dumps(cfg))
    extra = [a for p in plugins for a in ("-p", p)]
    before, after = extra[: 2 * plugins_before_seal], extra[2 * plugins_before_seal :]
    hook = ["-o", "enable_assertion_pass_hook=true"] if pass_hook else []
    env = {"PYTHONPATH": f"{lib_dir}:{seal_dir}", "PATH": "/usr/bin:/bin"}
    if dont_write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *before, "-p", module, *hook, *after,
         *targets],
        cwd=work, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    duration = time.monotonic() - start
    seal = seal_dir / "seal.json"
    assert seal.is_file(), (
        f"no seal written (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
    )
    body = json.loads(json.loads(seal.read_text())["body"])
    return SealedRun(body, proc.stdout + proc.stderr, proc.returncode, duration, work, seal_dir)
