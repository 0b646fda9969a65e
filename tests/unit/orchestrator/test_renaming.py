"""Made-up names for the multistep bootstrap (`model.bootstrap.rename`): a renamed expert transcript
is the same episode under other names, and no original name survives it."""

from __future__ import annotations

import random
import re
import subprocess
import sys

import pytest

from inhabit.orchestrator.quickstart.bootstrap import (
    RenamedExamples,
    quickstart_tokenizer,
    transcript_contexts,
    transcript_examples,
)
from inhabit.orchestrator.quickstart.renaming import (
    NameDrawer,
    is_renamable,
    names_in,
    renamed,
    transcript_words,
)
from inhabit.taskgen.families.multistep import generate, write_multistep_tasks

WINDOW = 1024


@pytest.fixture(scope="module")
def episodes(tmp_path_factory, play_multistep_expert):
    """(task, transcript) of the expert on a normal and a long task, in the multistep config's window."""
    drawn = generate(8, 3, long_share=0.5)
    tasks = [t for t in drawn if not t.long][:1] + [t for t in drawn if t.long][:1]
    roots = write_multistep_tasks(tmp_path_factory.mktemp("tasks"), tasks)
    tok = quickstart_tokenizer()
    # ungraded: test_the_renamed_episode_is_the_same_episode runs the fix itself
    trajs = play_multistep_expert(tasks, roots, tok, seed=3, grade=False, window=WINDOW)
    assert len(trajs) == len(tasks)
    by_id = {t.id: t for t in tasks}
    return tok, [(by_id[tr.task_id], tr) for tr in trajs]


def _messages(traj):
    return [m for msgs, _ in transcript_contexts(traj) for m in msgs]


def test_names_are_the_package_its_modules_and_functions_never_the_harness_words(episodes):
    _, pairs = episodes
    for task, traj in pairs:
        names = names_in(_messages(traj))
        assert task.package in names
        module = task.bug["module"].removeprefix(task.package + "/").removesuffix(".py")
        assert task.bug["function"] in names
        # a module is renamed unless its name is also a word of Python's (`items`, a dict's method)
        assert (module in names) == is_renamable(module)
        assert not {"read_file", "edit_file", "run_tests", "finish", "path", "old", "new", "tool"} & set(
            names
        )
        assert not [n for n in names if n.startswith("test_")]  # a test carries its function's rename


def test_a_renamed_transcript_keeps_no_original_name_and_its_calls_still_parse(episodes):
    tok, pairs = episodes
    drawer = NameDrawer(tok.convert_ids_to_tokens(list(range(len(tok)))))
    rng = random.Random(0)
    for _, traj in pairs:
        msgs = _messages(traj)
        names = names_in(msgs)
        mapping = drawer.draw(names, rng, transcript_words(msgs))
        assert len(set(mapping.values())) == len(names)  # distinct, and none an existing word
        assert not set(mapping.values()) & transcript_words(msgs)
        out = renamed(msgs, mapping)
        assert out[0] == msgs[0]  # the system prompt is never renamed
        text = "\n".join(m.content for m in out[1:])
        for name in names:
            assert not re.search(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", text), name
        calls = "\n".join(m.content for m in out if m.role == "assistant")
        assert calls.count('<tool name="') == "\n".join(
            m.content for m in msgs if m.role == "assistant"
        ).count('<tool name="')


def test_the_renamed_episode_is_the_same_episode(episodes, tmp_path):
    """The task's files under the same renaming, the transcript's renamed edit applied: the renamed
    package's whole suite, hidden tests included, passes; before the edit its facade test fails."""
    _, pairs = episodes
    drawer = NameDrawer()
    for k, (task, traj) in enumerate(pairs):
        msgs = _messages(traj)
        mapping = drawer.draw(names_in(msgs), random.Random(k), transcript_words(msgs))
        pattern = re.compile(
            r"(?<![A-Za-z0-9])("
            + "|".join(map(re.escape, sorted(mapping, key=len, reverse=True)))
            + r")(?![A-Za-z0-9])"
        )

        def swap(m, mapping=mapping):
            return mapping[m.group(1)]

        root = tmp_path / f"t{k}"
        for path, text in {**task.workspace, **task.hidden}.items():
            f = root / pattern.sub(swap, path)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(pattern.sub(swap, text))
        out = renamed(msgs, mapping)
        edit = next(m.content for m in out if m.role == "assistant" and 'name="edit_file"' in m.content)
        path, old, new = (
            re.search(f"<{tag}>(.*?)</{tag}>", edit, re.S).group(1) for tag in ("path", "old", "new")
        )
        assert path == pattern.sub(swap, task.bug["module"])
        run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"]
        # no bytecode: the edit keeps the file's size, and a .pyc of the same second would be reused
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"}
        assert subprocess.run(run, cwd=root, env=env, capture_output=True).returncode == 1
        source = (root / path).read_text()
        assert source.count(old) == 1
        (root / path).write_text(source.replace(old, new))
        done = subprocess.run(run, cwd=root, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:]


def test_draws_rename_the_share_asked_and_train_the_same_turns(episodes):
    tok, pairs = episodes
    trajs = [tr for _, tr in pairs]
    recorded = [e for tr in trajs for e in transcript_examples(tok, tr)]
    none = RenamedExamples(tok, trajs, 0.0, WINDOW)
    assert none.examples == recorded
    rng = random.Random(0)
    assert all(none.draw(i, rng) == recorded[i] for i in range(len(none)))
    every = RenamedExamples(tok, trajs, 1.0, WINDOW)
    seen = []
    for i in range(len(every)):
        ids, mask = every.draw(i, rng)
        assert len(ids) <= WINDOW and len(mask) == len(ids)
        # the same assistant messages are trained: one run of loss tokens per trained message
        runs = lambda m: sum(b and not a for a, b in zip([False, *m], m, strict=False))  # noqa: E731
        assert runs(mask) == runs(recorded[i][1])
        seen.append(ids != recorded[i][0])
    assert every.renamed + every.kept == len(every) and every.renamed >= len(every) - 2
    assert sum(seen) == every.renamed
    # two draws of one example give two sets of names
    assert every.draw(0, rng) != every.draw(0, rng)
