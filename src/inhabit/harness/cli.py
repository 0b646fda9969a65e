"""Commands that the harness part adds to `inhabit`: `agent` and `replay`.

Heavy imports (openai, sentence-transformers, grading) stay inside the command bodies. Machine-
readable output (`replay --json`) goes to stdout alone; logs and warnings go to stderr.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer

from inhabit.sandbox.backends import SANDBOX_BACKENDS

_SANDBOX_HELP = f"Sandbox backend: {SANDBOX_BACKENDS.choices(local_only=True)}."

# An agent session that ended in one of these did not do its work: `inhabit agent` exits 1.
FAILED_STATUSES = ("policy_error", "sandbox_error", "error")


def _provider(backend: str) -> Any:
    from inhabit.sandbox import SandboxConfig, create_provider

    SANDBOX_BACKENDS.check(backend, local_only=True)
    return create_provider(SandboxConfig(backend=backend))


def _harness_config(path: Path | None, overrides: list[str]) -> Any:
    from inhabit.config import load_config
    from inhabit.harness.config import HarnessConfig

    return load_config(HarnessConfig, path, overrides)


def replay_report(traj: Any) -> dict[str, Any]:
    """The one JSON object `inhabit replay --json` prints."""
    return {
        "task_id": traj.task_id,
        "reward": traj.reward if traj.reward is not None else 0.0,
        "flags": list(traj.flags),
        "status": traj.status,
        "error": traj.error,
        "transcript": [
            {
                "turn": c.turn,
                "tool": c.tool,
                "args": c.args,
                "observation": c.observation,
                "error": c.error,
            }
            for c in traj.tool_calls
        ],
        "final_message": traj.final_message,
        "grading": traj.grading,
        "timings": traj.timings,
    }


async def _replay(task_dir: Path, actions: Path, backend: str, cfg: Any) -> Any:
    from inhabit.harness.replay import ReplayPolicy
    from inhabit.harness.rollout import run_rollout
    from inhabit.tasks.task import load_task

    task = load_task(task_dir)
    policy = ReplayPolicy.from_file(actions)
    # Every turn of the file runs, plus the closing finish, whatever the default turn limit.
    cfg = cfg.model_copy(update={"max_turns": max(cfg.max_turns, policy.num_turns + 1)})
    provider = _provider(backend)
    try:
        return await run_rollout(task, policy, provider, config=cfg)
    finally:
        await provider.close()


def _print_replay(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    table = Table(title=f"replay of {escape(report['task_id'])}", show_lines=True)
    for col in ("turn", "tool", "args", "observation"):
        table.add_column(col, overflow="fold")
    for c in report["transcript"]:
        args = ", ".join(f"{k}={str(v)[:80]!r}" for k, v in c["args"].items())
        obs = "\n".join(c["observation"].splitlines()[:8])
        style = "red" if c["error"] else None
        table.add_row(str(c["turn"] + 1), escape(str(c["tool"])), escape(args), escape(obs), style=style)
    console.print(table)
    colour = "green" if report["reward"] >= 1 else "red"
    console.print(
        f"status: {report['status']}" + (f" ({escape(report['error'])})" if report["error"] else "")
    )
    console.print(f"reward: [{colour}]{report['reward']}[/{colour}]")
    console.print(f"flags: {escape(', '.join(report['flags'])) or 'none'}")
    outcomes = report["grading"].get("outcomes", {})
    for node, outcome in outcomes.items():
        console.print(f"  {escape(node)}: {escape(str(outcome))}", highlight=False)


async def _agent(
    repo: Path,
    model: str,
    instruction: str,
    *,
    yes: bool,
    model_name: str | None,
    api_key: str | None,
    backend: str,
    cfg: Any,
    context_window: int,
    env: Path | None = None,
) -> Path:
    from rich.console import Console
    from rich.markup import escape
    from rich.syntax import Syntax

    from inhabit.harness.agent import (
        ConsoleObserver,
        apply_changes,
        render_diff,
        save_session,
        workspace_changes,
    )
    from inhabit.harness.loop import run_episode
    from inhabit.inference.policies import make_policy
    from inhabit.online.config import repo_opt_in

    console = Console()
    online = repo_opt_in(repo)
    policy = make_policy(
        model,
        model_name=model_name,
        api_key=api_key,
        context_window=context_window,
        logprobs=online is not None and online.logprobs,
    )
    provider = _provider(backend)
    try:
        from inhabit.sandbox.base import create_sandbox

        sandbox = await create_sandbox(provider, repo, env=env)
        try:
            traj = await run_episode(
                policy,
                sandbox,
                instruction,
                config=cfg,
                task_id=f"agent:{repo.name}",
                observer=ConsoleObserver(console),
            )
            changes = await workspace_changes(repo, sandbox)
        finally:
            await sandbox.close()
    finally:
        await provider.close()
        await policy.close()
    console.rule(f"episode {traj.status}")
    if traj.error:  # printed whole: a rule's title would cut it at the terminal's width
        console.print(f"[red]error:[/red] {escape(traj.error)}", highlight=False)
    if traj.final_message:
        console.print(escape(traj.final_message))
    if not changes:
        console.print("no changes to the repository.")
        decision = "no_changes"
    else:
        console.print(Syntax(render_diff(changes), "diff", theme="ansi_dark", word_wrap=True))
        summary = ", ".join(f"{c.kind} {c.path}" for c in changes)
        if yes or _confirm(f"Apply these changes to {repo}? ({summary})"):
            apply_changes(repo, changes)
            decision = "accepted"
            console.print(f"[green]applied {len(changes)} change(s) to {escape(str(repo))}[/green]")
        else:
            decision = "rejected"
            console.print("[yellow]changes discarded; the repository is untouched[/yellow]")
    path = save_session(repo, traj, changes, decision, model=model)
    console.print(f"session saved to {escape(str(path))}", highlight=False)
    if online is not None:
        from inhabit.online.record import record_agent_session

        try:
            sid = record_agent_session(online.store_path(), repo, traj, changes, decision, model=model)
        except Exception as e:  # the work is done and saved above: a store that fails only warns
            console.print(
                f"[yellow]online: session not recorded ({escape(f'{type(e).__name__}: {e}')})[/yellow]"
            )
        else:
            console.print(
                f"online: session {sid} recorded; rate it with `inhabit online feedback {sid} good|bad`",
                highlight=False,
            )
    if traj.status in FAILED_STATUSES:
        raise typer.Exit(1)
    return path


def _confirm(question: str) -> bool:
    try:
        return typer.confirm(question, default=False)
    except typer.Abort:  # no answer (closed stdin, Ctrl-C): keep the repository as it is
        return False


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""

    @app.command()
    def replay(
        task: Path = typer.Option(..., "--task", help="Task directory (task.toml, workspace/, hidden/)."),
        actions: Path = typer.Option(..., "--actions", help='JSON list of turns of {"tool", "args"} calls.'),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of a report."),
        sandbox: str = typer.Option("auto", "--sandbox", help=_SANDBOX_HELP),
        config: Path | None = typer.Option(None, "--config", help="TOML file of HarnessConfig fields."),
        overrides: list[str] = typer.Argument(None, help="HarnessConfig overrides, e.g. max_turns=10."),
    ) -> None:
        """Run an actions file through the real harness and sandbox, grade it, and report."""
        cfg = _harness_config(config, overrides or [])
        traj = asyncio.run(_replay(task, actions, sandbox, cfg))
        report = replay_report(traj)
        if json_out:
            typer.echo(json.dumps(report))
        else:
            _print_replay(report)

    @app.command()
    def agent(
        repo: Path = typer.Option(
            Path("."), "--repo", help="Repository to work on (it is copied into a sandbox)."
        ),
        model: str | None = typer.Option(
            None,
            "--model",
            envvar="INHABIT_MODEL",
            help="OpenAI-compatible endpoint URL (http://host:port/v1) or a local model folder.",
        ),
        task: str | None = typer.Option(None, "--task", help="What to do; asked for when not given."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Apply the final diff without asking."),
        model_name: str | None = typer.Option(
            None, "--model-name", help="Model id at the endpoint (default: the first it serves)."
        ),
        api_key: str | None = typer.Option(
            None, "--api-key", envvar="OPENAI_API_KEY", help="Endpoint API key."
        ),
        sandbox: str = typer.Option("auto", "--sandbox", help=_SANDBOX_HELP),
        context_window: int = typer.Option(
            32_768, "--context-window", min=512, help="Tokens the endpoint's model attends to."
        ),
        config: Path | None = typer.Option(None, "--config", help="TOML file of HarnessConfig fields."),
        overrides: list[str] = typer.Argument(None, help="HarnessConfig overrides, e.g. max_turns=10."),
        env: str = typer.Option(
            "repo",
            "--env",
            help="repo: the repository's .venv, read-only, when it has one; auto: else one resolved from "
            "what it declares (pyproject, requirements files); none: inhabit's Python.",
        ),
        wheelhouse: Path | None = typer.Option(
            None, "--wheelhouse", help="With --env auto: install offline from these wheels."
        ),
        allow_build: bool = typer.Option(
            False,
            "--allow-build",
            help="With --env auto: build packages that have no wheel (runs their code here).",
        ),
    ) -> None:
        """Run the agent on a sandboxed copy of a repository; apply its diff only if you accept it."""
        from inhabit.errors import HarnessError

        repo = repo.resolve()
        if not repo.is_dir():
            raise HarnessError(f"--repo {repo} is not a directory")
        if model is None:
            raise HarnessError(
                "pass --model URL_OR_PATH (or set INHABIT_MODEL), e.g. --model http://127.0.0.1:8000/v1"
            )
        if not task:
            if yes:
                raise HarnessError("--yes needs --task TEXT (there is nobody to ask for the task)")
            task = typer.prompt("Task")
        cfg = _harness_config(config, overrides or [])
        from inhabit.envs.task_env import repo_environment

        env_dir, env_line = repo_environment(repo, env, wheelhouse=wheelhouse, allow_build=allow_build)
        typer.echo(env_line)
        asyncio.run(
            _agent(
                repo,
                model,
                task,
                yes=yes,
                model_name=model_name,
                api_key=api_key,
                backend=sandbox,
                cfg=cfg,
                context_window=context_window,
                env=env_dir,
            )
        )
