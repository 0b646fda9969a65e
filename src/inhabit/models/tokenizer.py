"""The project's own tokenizer for tiny models: a byte-level BPE plus a chat template.

Trained with the `tokenizers` library on text this project synthesizes (`corpus.py`: Python code
and harness transcripts with tool calls), so no tokenizer is ever downloaded. Byte-level means
every string round-trips exactly (`decode(encode(s)) == s`), code and tool calls included.

Special tokens (ids 0-6, in this order):

    <|endoftext|>  end of a document (also a second stop id in generation_config.json)
    <|bos|>        bos_token: starts every rendered chat
    <|pad|>        pad_token
    <|system|> <|user|> <|assistant|>   role markers: open a message
    <|end|>        eos_token: closes a message (generation stops on it)

Chat format (the Jinja template in `tokenizer.chat_template`, written to the model folder):

    <|bos|><|system|>{system}<|end|><|user|>{user}<|end|><|assistant|>{assistant}<|end|>...

with `<|assistant|>` appended when `add_generation_prompt=True`. Nothing (no newline) sits
between a closing `<|end|>` and the next role marker, and contents are bounded by special tokens
on both sides; so a prompt rendered with the generation prompt, followed by the tokens the model
generated up to `<|end|>`, is token-for-token a prefix of the next turn's rendering (the usual
caveat: text re-encoded from decoded tokens may pick different BPE merges). Message contents are
free text: tool calls are the harness's XML-like tags and observations are whatever the harness puts
in a user message; both are ordinary BPE text the tokenizer was trained on. `encode_chat` encodes
contents with special-token strings split, so a file holding `<|end|>` cannot forge a turn;
tokenizing `render_chat`'s text (as a generic OpenAI-style server would) does not protect that.

    tok = default_tokenizer()                       # trained once (seconds), then cached
    text = render_chat(tok, messages)               # harness `Message`s or role/content dicts
    ids = encode_chat(tok, messages)                # token ids of that text, bos included once

(transformers 5's own `tok.apply_chat_template(dicts, add_generation_prompt=True)` works too, but
returns a `BatchEncoding` when tokenizing and rejects dataclass messages, hence these helpers.)

`default_tokenizer()` caches under `$INHABIT_CACHE_DIR` or `$XDG_CACHE_HOME/inhabit` (default
`~/.cache/inhabit`), keyed by everything that shapes the result (corpus version, vocabulary size,
seed, pre-tokenizer, special tokens, template, `tokenizers` version).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

ENDOFTEXT, BOS, PAD, END = "<|endoftext|>", "<|bos|>", "<|pad|>", "<|end|>"
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
SPECIAL_TOKENS = [ENDOFTEXT, BOS, PAD, *ROLE_TOKENS.values(), END]

CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{- raise_exception('unknown chat role ' ~ message['role'] ~ ': use system, user or assistant') -}}"
    "{%- endif -%}"
    "{{- '<|' ~ message['role'] ~ '|>' ~ message['content'] ~ '<|end|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"
)

# The same chat format with OpenAI `tools`, in the style of Qwen3's template: the tools as JSON lines
# in a `<tools>` block of the system turn, calls as `<tool_call>` JSON (the `hermes` parser reads
# them), and consecutive `tool` messages as `<tool_response>` blocks of one user turn. Used by the
# native quickstart (`tokenizer = "quickstart-native"`); the project's own models keep CHAT_TEMPLATE.
NATIVE_TOOLS_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
NATIVE_TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call>"
)
NATIVE_CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- if tools -%}"
    "{{- '<|system|>' -}}"
    "{%- if messages and messages[0]['role'] == 'system' -%}{{- messages[0]['content'] ~ '\n\n' -}}{%- endif -%}"
    "{{- " + json.dumps(NATIVE_TOOLS_INTRO) + " -}}"
    "{%- for tool in tools -%}{{- '\n' ~ (tool | tojson) -}}{%- endfor -%}"
    "{{- " + json.dumps(NATIVE_TOOLS_OUTRO) + " ~ '<|end|>' -}}"
    "{%- elif messages and messages[0]['role'] == 'system' -%}"
    "{{- '<|system|>' ~ messages[0]['content'] ~ '<|end|>' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set role = message['role'] -%}"
    "{%- if role == 'system' and loop.first -%}"
    "{%- elif role in ['system', 'user'] -%}"
    "{{- '<|' ~ role ~ '|>' ~ message['content'] ~ '<|end|>' -}}"
    "{%- elif role == 'assistant' -%}"
    "{{- '<|assistant|>' ~ (message['content'] or '') -}}"
    "{%- for call in message['tool_calls'] or [] -%}"
    "{%- set fn = call['function'] -%}"
    "{%- if not loop.first or message['content'] -%}{{- '\n' -}}{%- endif -%}"
    "{{- '<tool_call>\n{\"name\": \"' ~ fn['name'] ~ '\", \"arguments\": ' -}}"
    "{%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}{%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}"
    "{{- '}\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|end|>' -}}"
    "{%- elif role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|user|>' -}}"
    "{%- else -%}{{- '\n' -}}{%- endif -%}"
    "{{- '<tool_response>\n' ~ message['content'] ~ '\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|end|>' -}}{%- endif -%}"
    "{%- else -%}"
    "{{- raise_exception('unknown chat role ' ~ role ~ ': use system, user, assistant or tool') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"
)

# Pre-tokenization (BPE merges never cross these pieces): GPT-style, but an identifier with
# underscores and digits (`read_file`, `test_add2`) is one piece, optionally led by one
# punctuation mark or space (`<tool`, ` name`, `.append`), so snake_case names and the harness's
# tool tags can become single tokens; digits go in runs of up to three; newlines stay apart.
PRE_TOKENIZE_PATTERN = (
    r"'(?:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?[\p{L}_][\p{L}\p{N}_]*|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

DEFAULT_VOCAB_SIZE = 4096
MODEL_MAX_LENGTH = 1 << 20  # the model config bounds the context, not the tokenizer


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE, *, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts`; `len(result) == vocab_size` when the text allows it."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (bytes + special tokens)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRE_TOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return wrap_tokenizer(tok)


def wrap_tokenizer(tok: Any) -> PreTrainedTokenizerFast:
    """A transformers tokenizer around a trained `tokenizers.Tokenizer`, with our specials and template."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=END,
        pad_token=PAD,
        additional_special_tokens=[ENDOFTEXT, *ROLE_TOKENS.values()],
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def cache_root() -> Path:
    """Where inhabit caches things it can rebuild (tokenizers)."""
    if env := os.environ.get("INHABIT_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inhabit"


def default_tokenizer(
    *, vocab_size: int = DEFAULT_VOCAB_SIZE, seed: int = 0, cache_dir: str | Path | None = None
) -> PreTrainedTokenizerFast:
    """The tokenizer trained on `build_default_corpus(seed=seed)`, cached after the first call."""
    import tokenizers
    from transformers import AutoTokenizer

    from inhabit.models.corpus import CORPUS_VERSION, build_default_corpus

    # Anything that changes the trained result is in the key, so a stale cache is never reused.
    recipe = [
        CORPUS_VERSION,
        vocab_size,
        seed,
        PRE_TOKENIZE_PATTERN,
        SPECIAL_TOKENS,
        CHAT_TEMPLATE,
        tokenizers.__version__,
    ]
    key = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "tokenizers"
    target = root / f"bpe-{vocab_size}-{key}"
    if (target / "tokenizer.json").is_file():
        try:
            return AutoTokenizer.from_pretrained(str(target), local_files_only=True)
        except (OSError, ValueError):
            shutil.rmtree(target, ignore_errors=True)  # a damaged cache entry: rebuild it
    tok = train_tokenizer(build_default_corpus(seed=seed), vocab_size)
    root.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so a concurrent reader never sees half a folder.
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    save_tokenizer(tok, tmp)
    try:
        os.rename(tmp, target)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return tok


def save_tokenizer(tokenizer: Any, path: str | Path) -> None:
    """`save_pretrained`, with a tokenizer_config.json that older transformers (vLLM's) also read."""
    path = Path(path)
    tokenizer.save_pretrained(str(path))
    cfg_file = path / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    # transformers 5 writes its own class name; the fast-tokenizer alias loads in 4.x and 5.x.
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    for key in ("is_local", "local_files_only"):  # load-time flags, not properties of the tokenizer
        cfg.pop(key, None)
    if isinstance(getattr(tokenizer, "chat_template", None), str):  # also inline, for older readers
        cfg["chat_template"] = tokenizer.chat_template
    cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def to_chat_dicts(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """The dicts chat templates take, from harness `Message`s, `MessageRecord`s, dicts, or anything
    with those attributes: `role` and `content`, plus the native tool fields where set (assistant
    `tool_calls` with their JSON arguments as objects, as Qwen's and Llama's templates render them;
    a `tool` message's `tool_call_id` and `name`)."""
    out = []
    for m in messages:
        get = m.get if isinstance(m, Mapping) else lambda k, m=m: getattr(m, k, None)
        d: dict[str, Any] = {"role": str(get("role")), "content": str(get("content"))}
        if get("tool_calls"):
            d["tool_calls"] = [_template_call(c) for c in get("tool_calls")]
        for key in ("tool_call_id", "name"):
            if get(key) is not None:
                d[key] = str(get(key))
        out.append(d)
    return out


def _template_call(c: Mapping[str, Any]) -> dict[str, Any]:
    fn = c.get("function") or {}
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass  # the model's own text, rendered as it wrote it
    return {**c, "function": {"name": fn.get("name", ""), "arguments": args}}


def render_chat(
    tokenizer: Any,
    messages: Sequence[Any],
    *,
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """The chat as text, exactly as the model sees it (`tools`: OpenAI function tools, rendered by
    templates that take them, such as Qwen3's; the native tool format)."""
    return tokenizer.apply_chat_template(
        to_chat_dicts(messages),
        tools=list(tools) if tools is not None else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
    )


_CONTENT_ENCODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _content_encoder(tokenizer: Any) -> Any:
    """A private copy of the backend tokenizer that encodes special-token strings as plain text.

    transformers' `split_special_tokens=True` flips a flag on the SHARED backend for each call,
    which races when a server encodes from several threads; a copy with the flag fixed does not.
    """
    enc = _CONTENT_ENCODERS.get(tokenizer)
    if enc is None:
        from tokenizers import Tokenizer

        enc = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        enc.encode_special_tokens = True
        enc.no_truncation()
        enc.no_padding()
        _CONTENT_ENCODERS[tokenizer] = enc
    return enc


def encode_chat(
    tokenizer: Any,
    messages: Sequence[Any],
    *,
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[int]:
    """Token ids of the rendered chat (bos once, no extra special tokens).

    With this module's template, the ids are assembled per message and message contents are
    encoded with special-token strings split (as `split_special_tokens=True` would, but without
    its shared-state flag flip, so it is thread-safe): a file the agent reads that happens to contain
    `<|end|><|assistant|>` stays plain text instead of forging a turn boundary. For contents
    without such strings this equals tokenizing `render_chat(...)`. Other tokenizers (a real model's
    folder with its own template) get their template rendered (with `tools` and the messages' tool
    fields: the native tool format) and tokenized as usual. This module's template renders no tools:
    a native chat is a ValueError.
    """
    dicts = to_chat_dicts(messages)
    if getattr(tokenizer, "chat_template", None) != CHAT_TEMPLATE:
        text = render_chat(tokenizer, dicts, add_generation_prompt=add_generation_prompt, tools=tools)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if tools is not None or any("tool_calls" in m or m["role"] == "tool" for m in dicts):
        raise ValueError(
            "this chat uses the native tool format (tools, tool calls or tool messages), which the "
            "project's chat template does not render; use a model folder whose template renders "
            "`tools`, or the harness's xml tool format"
        )
    special = dict(zip(SPECIAL_TOKENS, tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS), strict=True))
    ids = [special[BOS]]
    for m in dicts:
        if m["role"] not in ROLE_TOKENS:
            raise ValueError(f"unknown chat role {m['role']}: use system, user or assistant")
        ids.append(special[ROLE_TOKENS[m["role"]]])
        ids += _content_encoder(tokenizer).encode(m["content"], add_special_tokens=False).ids
        ids.append(special[END])
    if add_generation_prompt:
        ids.append(special[ROLE_TOKENS["assistant"]])
    return ids
