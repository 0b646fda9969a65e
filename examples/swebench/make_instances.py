"""Make the SWE-bench-format instances in this folder from marshmallow's real git history.

    python examples/swebench/make_instances.py --upstream PATH/TO/marshmallow-clone [--out examples/swebench]

marshmallow (marshmallow-code/marshmallow) is a small pure-Python library whose 2.x tests need a
third-party package (pytz) and whose 2.x line declares its test extra only in setup.py
(`extras_require={"tests": ["pytest", "pytz"], ...}`): what `inhabit.envs.backend` reads through
the build backend. For each fix commit in INSTANCES below this script:
  1. takes its parent as base_commit and splits the commit's diff into `test_patch` (files under
     tests/) and the code `patch` (everything else);
  2. builds the instance's environment exactly as `inhabit tasks import-swebench` will: the
     requirements declared at environment_setup_commit, locked for the instance's Python and
     installed into inhabit's environment store (from PyPI, or --wheelhouse);
  3. runs the test files the test patch touches in that environment, at base_commit with the
     test patch applied and at the fix commit, and records per-test outcomes (pytest node ids):
     FAIL_TO_PASS = failed before and passed after, PASS_TO_PASS = passed both times. An instance
     with no FAIL_TO_PASS test is an error, not an instance.

The instances from 2018 (marshmallow/ at the top level) import `Mapping` from `collections`,
which Python 3.10 removed: their tests cannot even be collected on 3.11, so they name
`"python": "3.8"`. The 2019 ones run on inhabit's 3.11.

Repository data: `import-swebench` wants a git clone in which the instances' commits exist.
marshmallow's whole history is about 8 MB, so this script ships a re-created repository instead
(`repos.bundle`, a git bundle; clone it as marshmallow-code__marshmallow): one commit per tree
the instances need (each base, each fix, the environment setup commit), in upstream order, each
holding upstream's tree byte for byte, with upstream's author, dates and message. Their ids
differ from upstream's (the parents differ), so each instance keeps upstream's id in
`upstream_commit`. Commit ids are deterministic: rerunning on the same upstream commits
reproduces the same bundle and instances.

Writes `instances.jsonl` and `repos.bundle` to --out, and prints what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = "marshmallow-code/marshmallow"
ENV_SETUP = "3a53f5e3"  # the last commit of the 2.x line: its setup.py declares the tests extra
# (upstream fix commit, Python the instance needs)
INSTANCES = [
    ("a8c2cf45", "3.8"),  # 2018-08: load_from as the ValidationError field name
    ("91f61c81", "3.8"),  # 2018-05: the correct key when plucking fields from nested data
    ("f56280b9", "3.8"),  # 2018-09: no TypeError for a non-collection with many=True
    ("dbb97293", "3.11"),  # 2019-09: don't swallow TypeErrors raised by _bind_to_schema
    ("9c0f7a82", "3.11"),  # 2019-09: respect `many` when set on a Nested instance
    ("82733e36", "3.11"),  # 2019-09: non-list validators passed to Email and URL
]

# A pytest plugin that writes {node id: outcome} to $OUTCOMES (no JUnit parsing needed).
_RECORDER = """
import json, os
_OUT = {}
def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        prev = _OUT.get(report.nodeid)
        if prev in (None, "passed"):
            _OUT[report.nodeid] = report.outcome
def pytest_sessionfinish(session):
    with open(os.environ["OUTCOMES"], "w") as f:
        json.dump(_OUT, f)
"""


def git(cwd: Path, *args: str, env: dict | None = None, stdin: bytes | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, input=stdin,
                          env={**os.environ, **(env or {})}, check=False)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"error: git {' '.join(args[:3])} failed: {proc.stderr.decode().strip()[-300:]}")
    return proc.stdout.decode()


def full(upstream: Path, rev: str) -> str:
    return git(upstream, "rev-parse", "--verify", f"{rev}^{{commit}}").strip()


def recreate(upstream: Path, commits: list[str], dest: Path) -> dict[str, str]:
    """A new repository at `dest` with one commit per upstream commit (same tree, author, dates,
    message), linear in upstream's commit-date order; returns upstream id -> new id."""
    dest.mkdir(parents=True)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "fetch", "-q", "--no-tags", str(upstream), *commits)
    order = sorted(set(commits), key=lambda c: int(git(upstream, "show", "-s", "--format=%ct", c)))
    mapping: dict[str, str] = {}
    parent: list[str] = []
    for c in order:
        fields = git(
            upstream, "show", "-s", "--format=%an%x00%ae%x00%ad%x00%cn%x00%ce%x00%cd", "--date=raw", c
        )
        an, ae, ad, cn, ce, cd = fields.rstrip("\n").split("\x00")
        message = git(upstream, "show", "-s", "--format=%B", c)
        env = {"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": ad,
               "GIT_COMMITTER_NAME": cn, "GIT_COMMITTER_EMAIL": ce, "GIT_COMMITTER_DATE": cd}  # fmt: skip
        tree = git(upstream, "rev-parse", f"{c}^{{tree}}").strip()
        new = git(dest, "commit-tree", tree, *parent, env=env, stdin=message.encode()).strip()
        mapping[c], parent = new, ["-p", new]
    git(dest, "update-ref", "refs/heads/main", parent[1])
    git(dest, "reflog", "expire", "--expire=now", "--all")
    git(dest, "gc", "-q", "--prune=now")
    return mapping


def split_diff(upstream: Path, fix: str) -> tuple[str, str]:
    names = git(upstream, "diff", "--name-only", f"{fix}^", fix).split()
    tests = [n for n in names if n.startswith("tests/")]
    code = [n for n in names if not n.startswith("tests/")]
    patch = git(upstream, "diff", "--binary", f"{fix}^", fix, "--", *code) if code else ""
    test_patch = git(upstream, "diff", "--binary", f"{fix}^", fix, "--", *tests) if tests else ""
    return patch, test_patch


def environment(upstream: Path, python: str, wheelhouse: str | None) -> tuple[Path, str, float]:
    """The built environment for `python` from what ENV_SETUP declares (as import-swebench does)."""
    from inhabit.envs.backend import backend_requirements
    from inhabit.envs.lock import env_id, lock_requirements
    from inhabit.envs.requirements import project_requirements
    from inhabit.envs.store import EnvStore

    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", ENV_SETUP], cwd=upstream, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        reqs = project_requirements(tmp)
        if not any(" extra " in r.source for r in reqs):
            reqs = backend_requirements(tmp, python=python, wheelhouse=wheelhouse) + reqs
    text = lock_requirements(reqs, python=python, wheelhouse=wheelhouse)
    lock = Path(tempfile.mkdtemp()) / "requirements.lock"
    lock.write_text(text)
    built = EnvStore().ensure(env_id(python, text.encode()), lock, python, wheelhouse=wheelhouse)
    return built.path, built.env_id, built.install_s


def outcomes(upstream: Path, commit: str, test_patch: str, env: Path, files: list[str]) -> dict[str, str]:
    """{node id: outcome} of `files` at `commit` (with `test_patch` applied when given)."""
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        archive = subprocess.run(["git", "archive", commit], cwd=upstream, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(ws)], input=archive.stdout, check=True)
        if test_patch:
            git(ws, "apply", "-", stdin=test_patch.encode())
        (Path(tmp) / "inhabit_recorder.py").write_text(_RECORDER)
        out = Path(tmp) / "outcomes.json"
        src = [str(ws / "src")] if (ws / "src").is_dir() else []
        env_vars = {**os.environ, "OUTCOMES": str(out), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                    "PYTHONPATH": os.pathsep.join([*src, tmp])}  # fmt: skip
        subprocess.run([str(env / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "inhabit_recorder", *files], cwd=ws, env=env_vars, capture_output=True,
                       timeout=600, check=False)  # fmt: skip
        if not out.is_file():
            sys.exit(f"error: the tests at {commit[:10]} wrote no outcomes (pytest could not start)")
        return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, type=Path, help="A clone of marshmallow-code/marshmallow.")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent, help="Where to write the files.")
    ap.add_argument("--wheelhouse", default=None, help="Build environments offline from this folder.")
    args = ap.parse_args()
    upstream = args.upstream.resolve()
    fixes = [(full(upstream, c), py) for c, py in INSTANCES]
    setup = full(upstream, ENV_SETUP)
    needed = [setup] + [c for f, _ in fixes for c in (full(upstream, f + "^"), f)]
    with tempfile.TemporaryDirectory() as tmp:
        mapping = recreate(upstream, needed, Path(tmp) / "repo")
        args.out.mkdir(parents=True, exist_ok=True)
        bundle = args.out / "repos.bundle"
        git(Path(tmp) / "repo", "bundle", "create", str(bundle), "HEAD", "main")
    envs = {}
    lines = []
    for fix, python in fixes:
        start = time.monotonic()
        if python not in envs:
            envs[python] = environment(upstream, python, args.wheelhouse)
            print(f"environment python {python}: {envs[python][1]} (install {envs[python][2]:.1f}s)")
        env = envs[python][0]
        base = full(upstream, fix + "^")
        patch, test_patch = split_diff(upstream, fix)
        files = sorted(
            {ln[6:] for ln in test_patch.splitlines() if ln.startswith("+++ b/") and ln.endswith(".py")}
        )
        before = outcomes(upstream, base, test_patch, env, files)
        after = outcomes(upstream, fix, "", env, files)
        f2p = sorted(t for t, o in after.items() if o == "passed" and before.get(t) != "passed")
        p2p = sorted(t for t, o in after.items() if o == "passed" and before.get(t) == "passed")
        if not f2p:
            sys.exit(f"error: {fix[:10]}: no test fails before the fix and passes after it")
        subject, _, body = git(upstream, "show", "-s", "--format=%B", fix).partition("\n")
        lines.append({
            "instance_id": f"marshmallow-code__marshmallow-{fix[:8]}",
            "repo": REPO,
            "base_commit": mapping[base],
            "environment_setup_commit": mapping[setup],
            "upstream_commit": fix,
            "python": python,
            "problem_statement": (subject.strip() + "\n\n" + body.strip()).strip(),
            "patch": patch,
            "test_patch": test_patch,
            "FAIL_TO_PASS": f2p,
            "PASS_TO_PASS": p2p,
        })  # fmt: skip
        print(f"{fix[:10]} python {python}: {len(f2p)} FAIL_TO_PASS, {len(p2p)} PASS_TO_PASS "
              f"({time.monotonic() - start:.1f}s)")  # fmt: skip
    (args.out / "instances.jsonl").write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
    size = sum((args.out / n).stat().st_size for n in ("instances.jsonl", "repos.bundle"))
    print(f"wrote {len(lines)} instances and repos.bundle to {args.out} ({size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
