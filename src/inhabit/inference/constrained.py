"""Constrained decoding: what a request's output must match, and the token masks that force it.

A `Guide` names the language the output must belong to: any JSON object (`json_object`), a JSON
Schema (`json_schema`; `strict` forbids properties the schema does not name), or an EBNF grammar
(`grammar`; forced tool calls are one, built by `tool_call_guide` in the tool-call format the
server parses). It is engine-neutral text, so the same guide goes to the embedded engine (below)
and, as `structured_outputs`, to vLLM and SGLang.

The embedded engine compiles a guide with xgrammar (bench/grammar_libs.py compares it with
llguidance on this CPU; docs/engine.md says why xgrammar) and keeps one matcher per request. Each
step the matcher gives the set of allowed next tokens; the sampler draws from the model's logits
with every other token at -inf, and the matcher then consumes the token drawn. Once the grammar is
complete only the engine's stop tokens stay allowed, so a constrained request ends with "stop"
(or "length" when `max_tokens` runs out first: the text is then a prefix of a valid answer).

Logprobs stay the model's: the reported logprob of a token (and `top_logprobs`) come from the
unmasked distribution, what a trainer recomputing from the weights gets. The token was not drawn
from that distribution, so a constrained choice is marked (`"constrained": true`, as penalties
mark `sampling_adjusted`) and the session recorder leaves it out of training data unless asked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from inhabit.inference.errors import InvalidRequest


@dataclass(frozen=True)
class Guide:
    """The language a request's output must belong to."""

    kind: Literal["json_object", "json_schema", "grammar"]
    spec: str = ""  # the JSON Schema as JSON text, or the EBNF grammar; empty for json_object
    strict: bool = True  # json_schema: no properties beyond those the schema names

    def wire(self) -> dict[str, Any]:
        """vLLM's `structured_outputs` for this guide (`inhabit serve`'s completions read it too):
        the schema as the client sent it, with the options that make vLLM decode it as the
        embedded engine does (no free whitespace between JSON tokens; `strict`: no properties
        beyond those the schema names)."""
        if self.kind == "json_object":
            return {"json_object": True, "disable_any_whitespace": True}
        if self.kind == "json_schema":
            return {
                "json": json.loads(self.spec),
                "disable_any_whitespace": True,
                "disable_additional_properties": self.strict,
            }
        return {"grammar": self.spec}

    def sglang(self) -> dict[str, str]:
        """SGLang's sampling parameters for this guide."""
        if self.kind == "grammar":
            return {"ebnf": self.spec}
        return {"json_schema": self.spec or '{"type": "object"}'}


def structured_outputs_guide(spec: Mapping[str, Any] | None) -> Guide | None:
    """The guide of vLLM's `structured_outputs` (json, json_object or grammar); ValueError if bad."""
    if not spec:
        return None
    if spec.get("json") is not None:
        schema = spec["json"]
        text = schema if isinstance(schema, str) else json.dumps(schema)
        _check_schema(text)
        return Guide("json_schema", text, strict=bool(spec.get("disable_additional_properties")))
    if spec.get("json_object"):
        return Guide("json_object")
    if isinstance(spec.get("grammar"), str):
        return Guide("grammar", spec["grammar"])
    raise ValueError("structured_outputs takes one of json, json_object or grammar")


# ------------------------------------------------------------------ requests to guides


def response_format_guide(fmt: Mapping[str, Any] | None) -> Guide | None:
    """The guide of a Chat Completions `response_format` (None for plain text); ValueError if bad."""
    if fmt is None:
        return None
    kind = fmt.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return Guide("json_object")
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema", {}), Mapping):
            raise ValueError("response_format json_schema needs `json_schema: {name, schema, strict?}`")
        guide = Guide("json_schema", json.dumps(spec.get("schema") or {}), bool(spec.get("strict", False)))
        _check_schema(guide.spec)
        return guide
    raise ValueError(f"response_format type {kind!r} is not supported (text, json_object, json_schema)")


def _check_schema(schema: str) -> None:
    """ValueError naming what xgrammar finds wrong with a JSON Schema (no tokenizer needed)."""
    import xgrammar as xg

    try:
        xg.Grammar.from_json_schema(schema)
    except Exception as e:  # RuntimeError with the converter's message after a location prefix
        reason = str(e).strip().splitlines()[0].rsplit(": ", 1)[-1]
        raise ValueError(f"the JSON Schema cannot be used: {reason}") from None


# Where each JSON tool-call format puts a call: text before and after the JSON object, the key of
# the arguments, and what separates parallel calls.
_JSON_CALL_FORMATS = {
    "hermes": ('"<tool_call>\\n"', '"\\n</tool_call>"', "arguments", '"\\n"'),
    "llama3_json": ('""', '""', "parameters", '"; "'),
}


def tool_call_guide(
    tools: Sequence[Mapping[str, Any]], names: Iterable[str], parser: str | None, parallel: bool
) -> Guide:
    """A grammar forcing one call (or, with `parallel`, one or more) to the functions `names`, in
    the call format of `parser`. ValueError when that format is not one a grammar is written for."""
    import xgrammar as xg

    if parser not in _JSON_CALL_FORMATS:
        raise ValueError(
            f"tool_choice 'required' or a named function is enforced for the JSON call formats "
            f"({', '.join(_JSON_CALL_FORMATS)}); this server parses {parser or 'no'} tool calls"
        )
    before, after, args_key, sep = _JSON_CALL_FORMATS[parser]
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    variants = []
    for name in names:
        params = by_name[name].get("parameters") or {"type": "object", "properties": {}}
        variants.append(
            {
                "type": "object",
                "properties": {"name": {"const": name}, args_key: params},
                "required": ["name", args_key],
                "additionalProperties": False,
            }
        )
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    # xgrammar writes the schema as EBNF (rules named root_*, basic_*); a call rule wraps it.
    body = str(xg.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True))
    body = _RULE_ROOT.sub(lambda m: m.group(0) if m.group(0)[0] in '"[' else "call_json", body)
    repeat = f" ({sep} call)*" if parallel else ""
    return Guide("grammar", f"root ::= call{repeat}\ncall ::= {before} call_json {after}\n{body}")


# The rule name `root` outside string literals and character classes (which it may also spell).
_RULE_ROOT = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|(?<![A-Za-z0-9_])root(?![A-Za-z0-9])')


# ------------------------------------------------------------------ masks in the embedded engine


class GrammarCompiler:
    """One engine's grammar compiler: the tokenizer's vocabulary as xgrammar sees it, and a cache of
    compiled guides (the same schema sent again costs nothing)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Iterable[int]) -> None:
        import xgrammar as xg

        self.vocab_size = vocab_size
        self.stop_ids = sorted(stop_ids)
        if not self.stop_ids:
            raise InvalidRequest("constrained decoding needs a stop token; this model has no EOS id")
        info = xg.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=self.stop_ids
        )
        self._compiler = xg.GrammarCompiler(info, max_threads=1)

    def compile(self, guide: Guide) -> Any:
        try:
            if guide.kind == "json_object":
                return self._compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
            if guide.kind == "json_schema":
                return self._compiler.compile_json_schema(
                    guide.spec, any_whitespace=False, strict_mode=guide.strict
                )
            return self._compiler.compile_grammar(guide.spec)
        except Exception as e:  # xgrammar raises RuntimeError/ValueError with its parser's message
            raise InvalidRequest(f"the {guide.kind} cannot be compiled: {str(e).splitlines()[0]}") from None

    def matcher(self, guide: Guide) -> TokenMask:
        return TokenMask(self.compile(guide), self.vocab_size, self.stop_ids)


class TokenMask:
    """One request's position in its grammar: the allowed next tokens, and the tokens taken."""

    def __init__(self, compiled: Any, vocab_size: int, stop_ids: list[int]) -> None:
        import xgrammar as xg

        self._matcher = xg.GrammarMatcher(compiled, override_stop_tokens=stop_ids or None)
        self._bits = xg.allocate_token_bitmask(1, vocab_size)
        self._vocab = vocab_size
        # Bit j of 32-bit word w allows token 32 * w + j.
        self._shifts = torch.arange(32, dtype=torch.int32)

    def allowed(self) -> torch.Tensor:
        """A bool [vocab] tensor of the tokens the grammar allows next."""
        self._matcher.fill_next_token_bitmask(self._bits)
        bits = (self._bits[0, :, None] >> self._shifts) & 1
        return bits.reshape(-1)[: self._vocab].bool()

    def accept(self, token: int) -> None:
        if not self._matcher.accept_token(token):  # the sampler drew a masked token: a bug
            raise RuntimeError(f"the grammar refused token {token} that its own mask allowed")

    @property
    def done(self) -> bool:
        """Has the grammar ended (its stop token taken)?"""
        return self._matcher.is_terminated()
