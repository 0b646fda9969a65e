"""The tool-call parser: the documented format, its escaping rule, and fuzzing for crashes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inhabit.harness.parse import ParseProblem, ToolCall, parse_tool_calls, render_call


def calls(text: str) -> list[ToolCall | ParseProblem]:
    return parse_tool_calls(text)


def test_design_example_two_calls_in_order() -> None:
    text = (
        "Let me look.\n"
        '<tool name="read_file"><path>calc.py</path></tool>\n'
        '<tool name="grep"><pattern>def add</pattern></tool>'
    )
    got = calls(text)
    assert [(c.name, dict(c.args)) for c in got] == [  # type: ignore[union-attr]
        ("read_file", {"path": "calc.py"}),
        ("grep", {"pattern": "def add"}),
    ]


def test_code_with_angle_brackets_ampersands_and_tool_tags_is_raw() -> None:
    code = "if a < b && c > d:\n    s = '</tool>' + \"<path>x</path>\" + '&lt;'\n"
    text = f'<tool name="write_file"><path>a.py</path><content>\n{code}</content></tool>'
    (call,) = calls(text)
    assert isinstance(call, ToolCall)
    assert call.args["content"] == code  # one leading newline dropped, the rest verbatim, no entities


def test_cdata_holds_its_own_closing_tag() -> None:
    value = "x = '</content>' ]]> y"
    text = render_call("write_file", {"path": "f", "content": value})
    assert "CDATA" in text
    (call,) = calls(text)
    assert isinstance(call, ToolCall) and call.args["content"] == value


def test_self_closing_and_single_quotes() -> None:
    got = calls("<tool name='finish'/>")
    assert isinstance(got[0], ToolCall) and got[0].name == "finish" and dict(got[0].args) == {}


def test_malformed_calls_become_problems_and_later_calls_survive() -> None:
    text = (
        '<tool name="read_file"><path>a.py</path>\n'  # not closed before the next call
        '<tool name="read_file"><path>b.py</path></tool>\n'
        "<tool><path>c</path></tool>\n"  # no name
        '<tool name="grep">junk<pattern>x</pattern></tool>\n'  # stray text
        '<tool name="grep"><pattern>x</pattern><pattern>y</pattern></tool>\n'  # duplicate arg
        '<tool name="edit_file"><old>never closed'
    )
    got = calls(text)
    kinds = [type(c).__name__ for c in got]
    assert kinds == [
        "ParseProblem",
        "ToolCall",
        "ParseProblem",
        "ParseProblem",
        "ParseProblem",
        "ParseProblem",
    ]
    assert "not closed with </tool> before the next <tool>" in got[0].message  # type: ignore[union-attr]
    assert got[1].args["path"] == "b.py"  # type: ignore[union-attr]
    assert "must name its tool" in got[2].message  # type: ignore[union-attr]
    assert "unexpected text" in got[3].message  # type: ignore[union-attr]
    assert "twice" in got[4].message  # type: ignore[union-attr]
    assert "never closed by </old>" in got[5].message  # type: ignore[union-attr]


def test_prose_without_calls_is_no_calls() -> None:
    assert calls("I think the bug is in add(); a < b <tools> are nice") == []


_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
_pieces = [*list("ab \n\t<>/&;'\"![]CDATA"), "</", "]]>", "<![CDATA[", "</content>", "</tool>", "</a>"]
_values = st.lists(st.sampled_from(_pieces), max_size=30).map("".join) | st.text(max_size=40)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=400))
def test_no_input_crashes_the_parser(text: str) -> None:
    for item in parse_tool_calls(text):
        assert isinstance(item, (ToolCall, ParseProblem))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                '<tool name="',
                "<tool ",
                '">',
                "</tool>",
                "<path>",
                "</path>",
                "<![CDATA[",
                "]]>",
                "/>",
                "x",
                "\n",
            ]
        ),
        max_size=40,
    )
)
def test_no_tag_soup_crashes_the_parser(pieces: list[str]) -> None:
    for item in parse_tool_calls("".join(pieces)):
        assert isinstance(item, (ToolCall, ParseProblem))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
            st.dictionaries(_names, _values, max_size=4),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_render_then_parse_round_trips(turn: list[tuple[str, dict[str, str]]]) -> None:
    text = "\nthinking...\n".join(render_call(name, args) for name, args in turn)
    got = parse_tool_calls(text)
    assert [(c.name, dict(c.args)) for c in got if isinstance(c, ToolCall)] == turn
    assert all(isinstance(c, ToolCall) for c in got)


_tool_pieces = [
    *(f'<tool name="{n}">' for n in ("read_file", "edit_file", "run", "grep", "finish", "nope")),
    "</tool>",
    "<path>a.py</path>",
    "<path>../../x</path>",
    "<start_line>x</start_line>",
    "<start_line>3</start_line>",
    "<content>",
    "</content>",
    "<old>a</old><new>b</new>",
    "<pattern>(</pattern>",
    "<message>done</message>",
    "<extra>1</extra>",
    "x",
    "\n",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_tool_pieces), max_size=30))
def test_no_text_crashes_call_planning(pieces: list[str]) -> None:
    from inhabit.harness.execute import plan_calls

    for call in plan_calls("".join(pieces)):
        assert (call.impl is None) == (call.observation is not None)  # runnable, or refused with a reason
        if call.observation is not None:
            assert call.observation.error and call.observation.text
