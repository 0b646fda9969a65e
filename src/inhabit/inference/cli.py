"""Commands that the inference part adds to `inhabit` (heavy imports stay inside command bodies)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""

    @app.command()
    def serve(
        model: str = typer.Option(..., "--model", help="Hugging Face model folder to serve."),
        host: str = typer.Option("127.0.0.1", "--host", help="Bind address (loopback by default)."),
        port: int = typer.Option(8000, "--port", help="TCP port."),
        api_key: str = typer.Option(
            None, "--api-key", envvar="INHABIT_API_KEY", help="Bearer token; enables /v1/load_weights."
        ),
        served_model_name: str = typer.Option(
            None, "--served-model-name", help="Model id (default: folder name)."
        ),
        tool_call_parser: str = typer.Option(
            None,
            "--tool-call-parser",
            help="auto (from the chat template), none, hermes, qwen3_coder, llama3_json or inhabit.",
        ),
        reasoning_parser: str = typer.Option(
            None, "--reasoning-parser", help="none, qwen3 or deepseek_r1: <think> into reasoning_content."
        ),
        xml_tools: bool = typer.Option(
            False,
            "--xml-tools",
            help="Templates that render no tools: describe request tools in inhabit's XML call format.",
        ),
        follow: str = typer.Option(
            None,
            "--follow",
            help="Weight store (folder or http URL): serve its newest version as it appears.",
        ),
        sessions: str = typer.Option(
            None, "--sessions", help="Session store: record requests that send an X-Inhabit-Session header."
        ),
        config: str = typer.Option(None, "--config", help="TOML file with a ServeConfig (overrides follow)."),
        override: list[str] = typer.Option(
            [], "--set", help="Dotted override, e.g. engine.max_batch_size=32 (repeatable)."
        ),
    ) -> None:
        """Serve a model with an OpenAI-compatible API plus the fields RL needs."""
        from inhabit.config import apply_overrides, read_toml, validate_config
        from inhabit.inference.config import ServeConfig

        data = read_toml(config) if config else {}
        data |= {"model": model, "host": host, "port": port}
        if api_key is not None:
            data["api_key"] = api_key
        if served_model_name is not None:
            data["served_model_name"] = served_model_name
        if tool_call_parser is not None:
            data["tool_call_parser"] = tool_call_parser
        if follow is not None:
            data["follow"] = follow
        if xml_tools:
            data["xml_tools"] = True
        if reasoning_parser is not None:
            data["reasoning_parser"] = reasoning_parser
        if sessions is not None:
            data["sessions"] = sessions
        cfg = validate_config(ServeConfig, apply_overrides(data, override), source=config or "serve options")
        from inhabit.inference.serve_cli import serve as run  # torch, transformers, uvicorn: only now

        run(cfg)
