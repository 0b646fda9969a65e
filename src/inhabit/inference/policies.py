"""`make_policy`: the policy that `--model` names, for `inhabit agent` and `inhabit eval`.

An http(s) URL is an OpenAI-compatible endpoint (`OpenAIPolicy`: vLLM, SGLang, `inhabit serve`);
an existing folder is a model run in this process (`LocalPolicy` over an `EmbeddedEngine`).
"""

from __future__ import annotations

from pathlib import Path

from inhabit.contracts import Policy
from inhabit.errors import ConfigError


def make_policy(
    model: str,
    *,
    model_name: str | None = None,
    api_key: str | None = None,
    context_window: int = 32_768,
    temperature: float | None = None,
    seed: int | None = None,
    logprobs: bool = False,
) -> Policy:
    """See module docstring. `temperature` None: the policy's own default (0 for an endpoint, 1 for
    a local model); `model_name`, `api_key` and `logprobs` (ask the endpoint for token logprobs; a
    local model always reports them) apply to endpoints, `seed` to local models."""
    if model.startswith(("http://", "https://")):
        from inhabit.inference.openai_policy import OpenAIPolicy

        extra = {} if temperature is None else {"temperature": temperature}
        return OpenAIPolicy(
            model, model_name, api_key=api_key, context_window=context_window, logprobs=logprobs, **extra
        )
    path = Path(model).expanduser()
    if path.is_dir():
        from inhabit.inference.local_policy import LocalPolicy

        extra = {} if temperature is None else {"temperature": temperature}
        return LocalPolicy.from_path(path, seed=seed, **extra)
    raise ConfigError(
        f"--model {model!r} is neither an http(s) URL of an OpenAI-compatible endpoint (e.g. "
        "http://127.0.0.1:8000/v1) nor an existing local model folder"
    )
