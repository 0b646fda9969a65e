"""`inhabit specialize` end to end on a tiny project the test writes (a pure-Python package of three
modules with a pytest suite) and a tiny model built from a spec: tasks by mutation, the split by
module, the baseline, the format bootstrap (a random model's turns never parse), RL, the gate, the
report and its refusal to call a result better on too little evidence; the project is
byte-identical afterwards (every file's bytes and mode, or the sdist's bytes, mode and mtime); a
second run reuses tasks and baseline.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inhabit.cli import app

pytestmark = pytest.mark.slow

PROJECT = {
    "pyproject.toml": '[project]\nname = "tinypkg"\nversion = "0.1"\n',
    "tinypkg/__init__.py": '"""A tiny package."""\n',
    "tinypkg/arith.py": (
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
        "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n"
    ),
    "tinypkg/text.py": (
        "def shout(s):\n    return s.upper() + '!'\n\n\ndef initials(name):\n"
        "    return ''.join(part[0] for part in name.split())\n\n\n"
        "def count_vowels(s):\n    return sum(1 for c in s.lower() if c in 'aeiou')\n"
    ),
    "tinypkg/seqs.py": (
        "def first(xs):\n    return xs[0]\n\n\ndef last(xs):\n    return xs[-1]\n\n\n"
        "def chunk(xs, n):\n    return [xs[i : i + n] for i in range(0, len(xs), n)]\n"
    ),
    "tests/test_arith.py": (
        "from tinypkg.arith import add, clamp, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_sub():\n    assert sub(5, 3) == 2\n\n\ndef test_clamp():\n"
        "    assert clamp(5, 0, 3) == 3 and clamp(-1, 0, 3) == 0 and clamp(2, 0, 3) == 2\n"
    ),
    "tests/test_text.py": (
        "from tinypkg.text import count_vowels, initials, shout\n\n\ndef test_shout():\n"
        "    assert shout('hi') == 'HI!'\n\n\ndef test_initials():\n    assert initials('Ada Lovelace') == 'AL'\n\n\n"
        "def test_vowels():\n    assert count_vowels('Banana') == 3\n"
    ),
    "tests/test_seqs.py": (
        "from tinypkg.seqs import chunk, first, last\n\n\ndef test_first_last():\n"
        "    assert first([1, 2, 3]) == 1 and last([1, 2, 3]) == 3\n\n\ndef test_chunk():\n"
        "    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]\n"
    ),
}

OVERRIDES = [
    "tasks.max_candidates=24", "tasks.env=none", "tasks.held_out_share=0.4",
    "eval.max_tasks=3", "eval.samples=1", "eval.concurrency=4",
    "harness.max_turns=4", "harness.max_turn_tokens=24",
    "engine.max_model_len=1024", "engine.max_batch_size=16",
    "rollout.group_size=2", "rollout.tasks_per_step=1", "rollout.concurrency=4", "rollout.max_tokens=24",
    "rollout.train_zero_advantage=true", "trainer.lr=1e-3", "rl_max_steps=2", "threads=1",
    "bootstrap.max_steps=4", "bootstrap.check_every=2", "bootstrap.transcripts=4", "bootstrap.probe_turns=2",
    "bootstrap.batch_size=2", "bootstrap.lr=1e-3",
]  # fmt: skip


def tree_fingerprint(root: Path) -> dict[str, tuple[str, int]]:
    """Every entry under `root`: its content hash (files, links) and its mode."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes() if p.is_file() else b"dir"
        out[p.relative_to(root).as_posix()] = (hashlib.sha256(data).hexdigest(), st.st_mode)
    return out


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "tinypkg-0.1"
    for rel, text in PROJECT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    from inhabit.models.tiny import save_model_folder
    from inhabit.orchestrator.config import ModelConfig
    from inhabit.orchestrator.prepare import build_start_model

    spec = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
            "intermediate_size": 64, "max_position_embeddings": 1024}  # fmt: skip
    model, tok = build_start_model(ModelConfig(spec=spec, tokenizer="quickstart"))
    return save_model_folder(model, tok, tmp_path / "tiny-model")


def specialize_args(project: Path, model: Path, out: Path, *extra: str) -> list[str]:
    """The command line after `inhabit`, as the tests run it."""
    return ["specialize", str(project), "--model", str(model), "--out", str(out), "--budget", "20m",
            "--progress", "plain", *OVERRIDES, *extra]  # fmt: skip


def specialize(project: Path, model: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, specialize_args(project, model, out, *extra))


def test_specialize_end_to_end_on_a_tiny_project(tmp_path: Path, project: Path, tiny_model: Path) -> None:
    before = tree_fingerprint(project)
    out = tmp_path / "run"
    # LoRA, as a real model trains by default: adapters trained, published, merged into model/
    result = specialize(project, tiny_model, out, "training=lora")
    assert result.exit_code == 0, result.output
    assert tree_fingerprint(project) == before  # nothing written into REPO

    state = json.loads((out / "state.json").read_text())
    steps = state["steps"]
    assert all(
        steps[s]["status"] == "done" for s in ("tasks", "baseline", "bootstrap", "rl", "final", "report")
    )
    tasks = steps["tasks"]["result"]
    # split by module: no module has tasks on both sides
    from inhabit.orchestrator.specialize.split import module_of

    sides = {}
    for side in ("train", "held_out"):
        for t in tasks[side]:
            sides.setdefault(module_of(out / "tasks" / "built" / t), set()).add(side)
    assert sides and all(len(v) == 1 for v in sides.values())
    assert tasks["train"] and tasks["held_out"]

    boot = steps["bootstrap"]["result"]  # a random model's turns do not parse: the bootstrap runs
    assert steps["baseline"]["result"]["summary"]["parse"]["rate"] < 0.5 and boot["ran"]
    assert boot["probes"] and (out / "bootstrap" / "model" / "config.json").is_file()
    assert boot["probed_on"] == "the repository's train tasks"
    assert steps["rl"]["result"]["ran"] and steps["rl"]["result"]["steps"] == 2
    assert steps["rl"]["result"]["training"].startswith("LoRA rank 16"), steps["rl"]["result"]
    assert (out / "rl" / "checkpoints").is_dir() and any((out / "rl" / "checkpoints").glob("*/adapter"))

    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] != "better" and report["claim"].startswith("NOT called better")
    assert report["before"]["episodes"] == report["after"]["episodes"] == 3
    assert {"tasks", "baseline", "bootstrap", "rl", "final"} <= set(report["wall_s"])
    assert report["serve"] == f"inhabit serve --model {out.resolve() / 'model'}"
    assert (out / "model" / "config.json").is_file() and not (out / "model" / "optimizer.pt").exists()
    assert not (out / "model" / "adapter").exists()  # the merged weights, servable as they are
    assert (out / "specialize.json").is_file()
    assert "RL: 2 steps, LoRA rank 16" in result.output
    assert "verdict: NOT called better" in result.output and "inhabit serve --model" in result.output

    # a second run reuses tasks, environment, baseline and bootstrap; RL runs again (here: none, so
    # the candidate the gate measures is the bootstrapped model)
    built = (out / "tasks" / "built").stat().st_mtime_ns
    again = specialize(project, tiny_model, out, "rl_max_steps=0")
    assert again.exit_code == 0, again.output
    assert "reusing from" in again.output and "tasks, baseline, bootstrap" in again.output
    assert (out / "tasks" / "built").stat().st_mtime_ns == built
    again_state = json.loads((out / "state.json").read_text())["steps"]
    assert again_state["rl"]["result"]["ran"] is False and not (out / "rl").exists()
    assert again_state["final"]["result"]["candidate"] == boot["model"]
    # the final evaluation ran afresh on the new candidate: no record of the first run's is reused
    finals = [json.loads(line) for line in (out / "final" / "records.jsonl").read_text().splitlines()]
    assert len(finals) == 3
    assert tree_fingerprint(project) == before


def sdist_of(project: Path, dest: Path) -> Path:
    """`project` as an sdist: a .tar.gz whose one top folder is the project's (name-version)."""
    import tarfile

    archive = dest / f"{project.name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(project, arcname=project.name)
    return archive


def file_fingerprint(path: Path) -> tuple[str, int, int]:
    """A file's content hash, mode and modification time."""
    st = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mode, st.st_mtime_ns


def test_ctrl_c_at_a_step_then_resume(tmp_path: Path, project: Path, tiny_model: Path) -> None:
    """The command as a user runs it on a downloaded sdist: SIGINT while a step runs exits 130 with
    the resume command, keeps the steps done so far, and `--resume` finishes from there without
    redoing them; the archive is byte-identical afterwards (bytes, mode, mtime)."""
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "downloads").mkdir()
    sdist = sdist_of(project, tmp_path / "downloads")
    before = file_fingerprint(sdist)
    out = tmp_path / "run"
    args = [sys.executable, "-m", "inhabit", *specialize_args(sdist, tiny_model, out)]
    src = str(Path(__file__).resolve().parents[2] / "src")  # this tree's code, not an installed copy
    env = {**os.environ, "PYTHONPATH": src}
    # A job started in the background (`cmd &`, nohup) inherits SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler: the child gets the default disposition back, as a
    # command typed at a terminal has.
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    state_file = out / "state.json"
    deadline = time.monotonic() + 600
    # Interrupt once the tasks step is done and a later step is under way.
    while time.monotonic() < deadline and proc.poll() is None:
        if state_file.is_file():
            try:
                steps = json.loads(state_file.read_text())["steps"]
            except (json.JSONDecodeError, KeyError):
                steps = {}
            if steps.get("tasks", {}).get("status") == "done":
                break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before the tasks step was seen done"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    assert "--resume" in output and "interrupted" in output
    steps = json.loads(state_file.read_text())["steps"]
    assert steps["tasks"]["status"] == "done"
    assert steps.get("report", {}).get("status") != "done"
    built = (out / "tasks" / "built").stat().st_mtime_ns

    resumed = specialize(sdist, tiny_model, out, "--resume")
    assert resumed.exit_code == 0, resumed.output
    final = json.loads(state_file.read_text())["steps"]
    assert all(
        final[s]["status"] == "done" for s in ("tasks", "baseline", "bootstrap", "rl", "final", "report")
    )
    assert (out / "tasks" / "built").stat().st_mtime_ns == built  # the tasks were not built again
    assert (out / "report.json").is_file()
    assert file_fingerprint(sdist) == before
    assert sorted(p.name for p in sdist.parent.iterdir()) == [sdist.name]  # nothing written beside it
