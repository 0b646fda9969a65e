"""Training text for the project's own tokenizer, synthesized here (nothing is downloaded).

Two kinds of text, both deterministic per seed:

* Python code generated from templates: functions, classes, tests, imports, loops, comprehensions,
  exceptions, docstrings; with identifiers drawn from word lists, so BPE learns Python's keywords,
  indentation runs and common identifier pieces.
* Harness transcripts: a system prompt, a task instruction, assistant turns holding DESIGN.md's
  XML-like tool calls (`<tool name="read_file"><path>calc.py</path></tool>`, all ten tools) and
  observations as the harness would show them (numbered lines, `file:line:text` matches, pytest and
  ruff summaries, directory trees).

Optionally the project's own source files are appended (`include_sources=True`); the default leaves
them out so that the default tokenizer is identical on every checkout.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

CORPUS_VERSION = 1
"""Bump when the generated text changes, so cached tokenizers are retrained."""


def _words(text: str) -> list[str]:
    return text.split()


_NOUNS = _words(
    "value item count total name path line user order price score node key index result data "
    "buffer token config record entry task file queue cache event message size width height "
    "amount rate limit offset length column row table matrix vector point grid text word"
)
_VERBS = _words(
    "add sub mul div get set load save parse format compute update remove find check build merge "
    "split join sort filter apply reset render read write count clamp normalize validate convert"
)
_MODULES = _words("calc utils parser models store geometry inventory stats strings shapes bank queue")
_OPS = [("+", "add"), ("-", "sub"), ("*", "mul"), ("//", "floordiv"), ("%", "mod")]


def _ident(rng: random.Random, parts: int = 2) -> str:
    words = [rng.choice(_VERBS)] + [rng.choice(_NOUNS) for _ in range(parts - 1)]
    return "_".join(words)


def _function(rng: random.Random) -> str:
    name = _ident(rng)
    a, b = rng.sample(_NOUNS, 2)
    op, word = rng.choice(_OPS)
    kind = rng.randrange(5)
    doc = f'    """Return the {word} of {a} and {b}."""\n' if rng.random() < 0.6 else ""
    ann = rng.random() < 0.5
    sig = f"def {name}({a}: int, {b}: int) -> int:" if ann else f"def {name}({a}, {b}):"
    if kind == 0:
        body = f"    return {a} {op} {b}\n"
    elif kind == 1:
        body = (
            f'    if {b} == 0:\n        raise ValueError("{b} must not be zero")\n    return {a} {op} {b}\n'
        )
    elif kind == 2:
        body = f"    result = 0\n    for i in range({a}):\n        result += i {op} {b}\n    return result\n"
    elif kind == 3:
        body = f"    return [x {op} {b} for x in range({a}) if x % 2 == 0]\n"
    else:
        body = (
            f"    try:\n        return int({a}) {op} int({b})\n"
            f"    except (TypeError, ValueError) as exc:\n"
            f'        raise RuntimeError(f"bad input: {{exc}}") from exc\n'
        )
    return sig + "\n" + doc + body


def _class(rng: random.Random) -> str:
    name = rng.choice(_NOUNS).capitalize() + rng.choice(_NOUNS).capitalize()
    fields = rng.sample(_NOUNS, rng.randint(2, 4))
    lines = ["from dataclasses import dataclass", "", "", "@dataclass", f"class {name}:"]
    lines.append(f'    """A {name.lower()} record."""')
    lines.append("")
    lines += [f"    {f}: {rng.choice(['int', 'str', 'float', 'list[int]'])}" for f in fields]
    lines += ["", f"    def {_ident(rng)}(self) -> dict:", "        return {"]
    lines += [f'            "{f}": self.{f},' for f in fields]
    lines += [
        "        }",
        "",
        "    def __repr__(self) -> str:",
        f'        return f"{name}({fields[0]}={{self.{fields[0]}!r}})"',
    ]
    return "\n".join(lines) + "\n"


def _test(rng: random.Random) -> str:
    mod = rng.choice(_MODULES)
    fn = _ident(rng)
    x, y = rng.randint(0, 99), rng.randint(1, 99)
    lines = ["import pytest", "", f"from {mod} import {fn}", "", ""]
    lines += [f"def test_{fn}():", f"    assert {fn}({x}, {y}) == {x + y}", "", ""]
    lines += [
        f'@pytest.mark.parametrize("a, b, expected", [({x}, {y}, {x * y}), (0, 1, 0)])',
        f"def test_{fn}_cases(a, b, expected):",
        f"    assert {fn}(a, b) == expected",
        "",
        "",
        f"def test_{fn}_raises():",
        "    with pytest.raises(ValueError):",
        f"        {fn}(1, 0)",
    ]
    return "\n".join(lines) + "\n"


def _module(rng: random.Random) -> str:
    header = f'"""{rng.choice(_MODULES).capitalize()}: helpers for {rng.choice(_NOUNS)}s."""\n\n'
    header += "from __future__ import annotations\n\nimport os\nimport sys\nfrom pathlib import Path\n\n\n"
    parts = [_function(rng) if rng.random() < 0.7 else _class(rng) for _ in range(rng.randint(1, 3))]
    tail = '\n\nif __name__ == "__main__":\n    print(main(sys.argv[1:]))\n' if rng.random() < 0.3 else ""
    return header + "\n\n".join(parts) + tail


def python_snippet(rng: random.Random) -> str:
    """One synthetic Python file or fragment."""
    return rng.choice((_function, _class, _test, _module, _module))(rng)


SYSTEM_PROMPT = (
    "You are a coding agent working in a repository. Call tools with XML-like tags, for example "
    '<tool name="read_file"><path>calc.py</path></tool>. Several calls in one turn run in parallel. '
    "Tools: read_file, write_file, edit_file, list_dir, grep, semantic_search, lint, run, run_tests, "
    "finish. Call finish with a message when the task is done."
)


def _numbered(code: str) -> str:
    return "\n".join(f"{i:>4}  {line}" for i, line in enumerate(code.splitlines(), 1))


def _observation(tool: str, body: str) -> str:
    return f'<result tool="{tool}">\n{body}\n</result>'


def transcript(rng: random.Random) -> list[tuple[str, str]]:
    """One synthetic harness episode as (role, content) messages."""
    mod = rng.choice(_MODULES)
    code = _function(rng)
    fn = code_first_name(code)
    test_id = f"tests/test_{mod}.py::test_{fn}"
    msgs = [("system", SYSTEM_PROMPT)]
    msgs.append(("user", f"The test {test_id} fails. Fix the bug in {mod}.py."))
    msgs.append(
        (
            "assistant",
            f"Let me look at the code and the failing test.\n"
            f'<tool name="read_file"><path>{mod}.py</path></tool>\n'
            f'<tool name="grep"><pattern>def {fn}</pattern><path>tests</path></tool>',
        )
    )
    msgs.append(
        (
            "user",
            _observation("read_file", _numbered(code))
            + "\n"
            + _observation("grep", f"tests/test_{mod}.py:{rng.randint(3, 40)}:def test_{fn}():"),
        )
    )
    extra = rng.randrange(4)
    if extra == 0:
        msgs.append(("assistant", '<tool name="list_dir"><path>.</path><depth>2</depth></tool>'))
        tree = f".\n  {mod}.py\n  README.md\n  tests/\n    test_{mod}.py\n    conftest.py"
        msgs.append(("user", _observation("list_dir", tree)))
    elif extra == 1:
        q = f"where is {rng.choice(_NOUNS)} {rng.choice(_VERBS)}ed"
        msgs.append(("assistant", f'<tool name="semantic_search"><query>{q}</query><top_k>3</top_k></tool>'))
        msgs.append(("user", _observation("semantic_search", f"{mod}.py:1-12 (score 0.83)\n{code[:120]}")))
    elif extra == 2:
        msgs.append(("assistant", f'<tool name="run"><command>python -c "import {mod}"</command></tool>'))
        msgs.append(("user", _observation("run", "exit code 0\n(no output)")))
    old_line = next((ln for ln in code.splitlines() if "return" in ln), code.splitlines()[-1]).strip()
    new_line = old_line.replace("-", "+", 1) if "-" in old_line else old_line.replace("+", "-", 1)
    if rng.random() < 0.8:
        msgs.append(
            (
                "assistant",
                "The operator is wrong.\n"
                f'<tool name="edit_file"><path>{mod}.py</path><old>{old_line}</old><new>{new_line}</new></tool>',
            )
        )
        msgs.append(("user", _observation("edit_file", f"edited {mod}.py: 1 replacement")))
    else:
        new_code = code.replace(old_line, new_line)
        msgs.append(
            (
                "assistant",
                f'<tool name="write_file"><path>{mod}.py</path><content>\n{new_code}</content></tool>',
            )
        )
        msgs.append(("user", _observation("write_file", f"wrote {len(new_code)} bytes to {mod}.py")))
    msgs.append(
        (
            "assistant",
            f'<tool name="run_tests"><selector>{test_id}</selector></tool>\n<tool name="lint"><path>{mod}.py</path></tool>',
        )
    )
    passed = rng.randint(1, 12)
    msgs.append(
        (
            "user",
            _observation("run_tests", f"{passed} passed, 0 failed in 0.{rng.randint(10, 99)}s")
            + "\n"
            + _observation(
                "lint",
                "All checks passed!"
                if rng.random() < 0.7
                else f"{mod}.py:1:8: F401 [*] `os` imported but unused",
            ),
        )
    )
    msgs.append(
        (
            "assistant",
            f'<tool name="finish"><message>Fixed {fn} in {mod}.py; the test passes.</message></tool>',
        )
    )
    return msgs


def code_first_name(code: str) -> str:
    """Name of the first function defined in `code` (or "main")."""
    for line in code.splitlines():
        if line.startswith("def "):
            return line[4:].split("(", 1)[0]
    return "main"


def project_sources(root: Path | None = None, limit_bytes: int = 2_000_000) -> Iterator[str]:
    """The text of the project's own .py and .md files under `root` (default: the inhabit package)."""
    root = root or Path(__file__).resolve().parents[1]
    used = 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".md") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        used += len(text)
        if used > limit_bytes:
            return
        yield text


def build_default_corpus(
    *, seed: int = 0, num_code: int = 3000, num_transcripts: int = 1500, include_sources: bool = False
) -> list[str]:
    """The default tokenizer's training text: code snippets and transcript messages, shuffled."""
    rng = random.Random(seed)
    texts = [python_snippet(rng) for _ in range(num_code)]
    for _ in range(num_transcripts):
        texts.extend(content for _, content in transcript(rng))
    if include_sources:
        texts.extend(project_sources())
    rng.shuffle(texts)
    return texts
