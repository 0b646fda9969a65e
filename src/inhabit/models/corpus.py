"""Training text for the project's own tokenizer, synthesized here (nothing is downloaded).

Two kinds of text, both deterministic per seed:

* Python code generated from templates: functions, classes, tests, imports, loops, comprehensions,
  exceptions, docstrings; with identifiers drawn from word lists, so BPE learns Python's keywords,
  indentation runs and common identifier pieces.
* Harness transcripts: a system prompt, a task instruction, assistant turns holding the harness's
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

CORPUS_VERSION = 5
"""Bump when the generated text changes, so cached tokenizers are retrained."""


def _words(text: str) -> list[str]:
    return text.split()


_NOUNS = _words(
    "value item count total name path line user order price score node key index result data "
    "buffer token config record entry task file queue cache event message size width height "
    "amount rate limit offset length column row table matrix vector point grid text word "
    "account address agent answer archive array batch block body branch bucket byte callback "
    "cell channel chunk client code commit context counter cursor date delta depth device digest "
    "directory document edge element error field filter flag folder frame graph group handler hash "
    "header heap host image input interval item job label layer level list lock log loop mask "
    "metric mode model module month number object option output owner packet page pair parent "
    "pattern payload peer pixel player pool port prefix process product profile prompt query range "
    "reader reason region report request resource response retry route rule sample schema scope "
    "section segment sequence server session shape signal slot snapshot socket source span stack "
    "state status step store stream string suffix summary symbol target template tensor thread "
    "ticket timeout timer title topic total trace tree tuple unit version vertex view weight window "
    "worker writer year zone temperature distance velocity balance invoice customer employee salary"
)
_VERBS = _words(
    "add sub mul div get set load save parse format compute update remove find check build merge "
    "split join sort filter apply reset render read write count clamp normalize validate convert "
    "append insert delete create open close start stop run execute send receive fetch push pop "
    "encode decode compress expand flatten group map reduce collect scan match replace strip trim "
    "resolve register handle process emit flush commit rollback retry wait notify schedule cancel "
    "serialize deserialize extract transform select sum average measure round truncate pad shift "
    "rotate scale resize crop draw print log trace report export import copy move rename swap"
)
_ADJECTIVES = _words(
    "empty new old first last next previous current default maximum minimum total valid invalid "
    "active pending failed missing broken correct wrong simple large small short long negative "
    "positive unique sorted nested hidden public private local remote global static dynamic"
)
_MODULES = _words(
    "calc utils parser models store geometry inventory stats strings shapes bank queue matrix "
    "graph cache config scheduler tokenizer server client records timeparse money units"
)
_BUILTIN_CALLS = _words(
    "len range enumerate zip sorted reversed sum min max abs round isinstance getattr setattr "
    "hasattr print open repr str int float bool list dict set tuple map filter any all iter next"
)
_METHODS = _words(
    "append extend insert pop remove sort items keys values get setdefault update join split strip "
    "lstrip rstrip startswith endswith replace lower upper format encode decode find count index"
)
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


def _methods(rng: random.Random) -> str:
    name = _ident(rng)
    items, key = rng.sample(_NOUNS, 2)
    adj = rng.choice(_ADJECTIVES)
    lines = [f"def {name}({items}: list[str], {key}: str = {rng.choice(['None', repr(key), '0'])}) -> dict:"]
    lines.append(f'    """Group {adj} {items} by {key}; {rng.choice(_VERBS)} each one first."""')
    lines.append("    groups: dict[str, list[str]] = {}")
    lines.append(f"    for i, item in enumerate({items}):")
    lines.append(f"        text = str(item).{rng.choice(['strip', 'lower', 'upper', 'rstrip'])}()")
    lines.append(f"        if not text.{rng.choice(['startswith', 'endswith'])}({key!r}):")
    lines.append("            continue")
    lines.append(
        f"        groups.setdefault(text[:{rng.randint(1, 9)}], []).{rng.choice(['append', 'insert'])}(text)"
    )
    call = rng.choice(_BUILTIN_CALLS)
    lines.append(f"    {adj}_{key} = {call}(groups.{rng.choice(['items', 'keys', 'values'])}())")
    lines.append(f'    logger.debug("{rng.choice(_VERBS)}ed %d {items}", len(groups))')
    lines.append(f"    return {{k: v for k, v in groups.items() if {rng.choice(_BUILTIN_CALLS)}(v)}}")
    return "\n".join(lines) + "\n"


def prose(rng: random.Random) -> str:
    """An English sentence of the kind found in task instructions, docstrings and comments."""
    n, m = rng.sample(_NOUNS, 2)
    v = rng.choice(_VERBS)
    a = rng.choice(_ADJECTIVES)
    return rng.choice(
        (
            f"The function {v}_{n} returns the {a} {m} instead of the {n}. Fix it so the tests pass.",
            f"Add a {n} parameter to {v}_{m} and make sure {a} inputs raise a ValueError.",
            f"# {v.capitalize()} the {a} {n} before we {rng.choice(_VERBS)} the {m}, because the cache may be stale.",
            f"When the {n} is {a}, {v}_{m} should return an empty list rather than None.",
            f"Refactor the {n} module: move {v}_{m} into utils.py and keep the public API unchanged.",
        )
    )


def python_snippet(rng: random.Random) -> str:
    """One synthetic Python file or fragment."""
    return rng.choice((_function, _class, _test, _module, _module, _methods, _methods))(rng)


SYSTEM_PROMPT = (
    "You are a coding agent working in a repository inside a sandbox. You act only through tools. Call tools with XML-like tags, for example "
    '<tool name="read_file"><path>calc.py</path></tool>. Several calls in one turn run in parallel. '
    "Tools: read_file, write_file, edit_file, list_dir, grep, semantic_search, lint, run, run_tests, "
    "finish. Call finish with a message when the task is done."
)


def _numbered(code: str) -> str:
    lines = code.splitlines()
    width = len(str(len(lines)))
    return "\n".join(f"{i:>{width}}\t{line}" for i, line in enumerate(lines, 1))


def _observation(tool: str, body: str, index: int = 0, error: bool = False) -> str:
    # The harness's observation wrapper (harness/prompts.py), one per call, in call order.
    status = ' status="error"' if error else ""
    return f'<observation index="{index}" tool="{tool}"{status}>\n{body}\n</observation>'


def transcript(rng: random.Random) -> list[tuple[str, str]]:
    """One synthetic harness episode as (role, content) messages."""
    mod = rng.choice(_MODULES)
    code = _function(rng)
    fn = code_first_name(code)
    test_id = f"tests/test_{mod}.py::test_{fn}"
    msgs = [("system", SYSTEM_PROMPT)]
    task = f"The test {test_id} fails. Fix the bug in {mod}.py."
    task_text = "Task:\n" + (task if rng.random() < 0.6 else f"{task} {prose(rng)}")
    if rng.random() < 0.15:  # a context segment after the harness summarized the earlier one
        task_text += (
            "\n\nSummary of your work so far (your earlier context was cleared):\n"
            f"I read {mod}.py; {fn} is defined at line 1. The test {test_id} fails. "
            f"Next: fix the operator in {fn} and run the test."
        )
    msgs.append(("user", task_text))
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
            + _observation("grep", f"tests/test_{mod}.py:{rng.randint(3, 40)}:def test_{fn}():", 1),
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
        msgs.append(("user", _observation("run", "exit code: 0\n(no output)")))
    old_line = next((ln for ln in code.splitlines() if "return" in ln), code.splitlines()[-1]).strip()
    new_line = old_line.replace("-", "+", 1) if "-" in old_line else old_line.replace("+", "-", 1)
    if rng.random() < 0.2:  # a failed call comes back as an error observation, then a retry
        msgs.append(
            (
                "assistant",
                f'<tool name="edit_file"><path>{mod}.py</path><old>{old_line} </old><new>x</new></tool>',
            )
        )
        msgs.append(
            (
                "user",
                _observation(
                    "edit_file", f"the old text occurs 0 times in {mod}.py; it must occur once", error=True
                ),
            )
        )
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
                1,
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
    texts.extend(prose(rng) for _ in range(num_code // 2))
    for _ in range(num_transcripts):
        texts.extend(content for _, content in transcript(rng))
    if include_sources:
        texts.extend(project_sources())
    rng.shuffle(texts)
    return texts
