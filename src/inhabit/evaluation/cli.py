"""Commands that the evaluation part adds to `inhabit`: `inhabit eval` (heavy imports stay inside
command bodies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from inhabit.sandbox.backends import SANDBOX_BACKENDS


def print_summary(summary: dict[str, Any], title: str) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    k = summary["k"]
    table = Table(title=escape(title))
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("tasks", summary["tasks"]),
        ("samples", summary["samples"]),
        ("success rate", pct(summary["success_rate"])),
        ("pass@1", pct(summary["pass@1"])),
        *([(f"pass@{k}", pct(summary.get(f"pass@{k}")))] if k > 1 else []),
        ("mean reward", f"{summary['mean_reward']:.3f}"),
        ("mean turns", f"{summary['mean_turns']:.1f}"),
        ("mean completion tokens", f"{summary['mean_completion_tokens']:.0f}"),
        ("samples with hack flags", summary["samples_flagged"]),
    ]
    if "mean_composed_reward" in summary:
        rows.append(("mean composed reward", f"{summary['mean_composed_reward']:.3f}"))
        for name, part in summary["reward_parts"].items():
            mean = "-" if part["mean"] is None else f"{part['mean']:.3f}"
            rows.append((f"  part {name}", f"{mean} ({part['missing']} missing)"))
    rows += [(f"  flag {f}", n) for f, n in summary["flags"].items()]
    rows += [(f"  outcome {c}", n) for c, n in summary["causes"].items()]
    for name, value in rows:
        table.add_row(escape(name), escape(str(value)))
    Console().print(table)


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""

    @app.command("eval")
    def eval_(
        tasks: Path = typer.Option(..., "--tasks", help="A task directory or a folder of them."),
        model: str = typer.Option(
            ..., "--model", help="OpenAI-compatible base URL (http://.../v1) or model folder."
        ),
        samples: int = typer.Option(1, "--samples", "-k", min=1, help="Rollouts per task (K of pass@K)."),
        concurrency: int = typer.Option(4, "--concurrency", "-j", min=1, help="Rollouts at once."),
        out: Path = typer.Option(
            Path("eval.json"), "--out", help="Summary JSON; records go to <out>.records.jsonl."
        ),
        resume: bool = typer.Option(
            False, "--resume", help="Continue an interrupted eval (skip recorded samples)."
        ),
        max_turns: int = typer.Option(None, "--max-turns", help="Override the harness's max_turns."),
        temperature: float = typer.Option(
            None, "--temperature", help="Sampling temperature; default 0 for one sample, 0.8 for K > 1."
        ),
        served_name: str = typer.Option(
            None, "--served-model", help="Model name at the endpoint (default: its first)."
        ),
        seed: int = typer.Option(None, "--seed", help="Sampling seed (local models)."),
        api_key: str = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", help="Endpoint API key."),
        backend: str = typer.Option(
            "auto", "--backend", help=f"Sandbox backend: {SANDBOX_BACKENDS.choices(local_only=True)}."
        ),
        tool_format: str = typer.Option(
            "auto",
            "--tool-format",
            help="xml (inhabit's), native (the model's own, via its chat template) or auto "
            "(native where the model folder's template or the endpoint parses its own format).",
        ),
        trajectories: Path = typer.Option(
            None, "--trajectories", help="Also save each trajectory JSON here."
        ),
        reward_config: Path = typer.Option(
            None, "--reward-config", help="TOML RewardConfig: also compose lint, diff and judge parts."
        ),
        max_turn_tokens: int = typer.Option(
            None, "--max-turn-tokens", help="Override the harness's max_turn_tokens."
        ),
    ) -> None:
        """Run a model over tasks K times with the training harness; print and save its scores."""
        import asyncio
        import json

        from pydantic import ValidationError

        from inhabit.evaluation.metrics import summarize
        from inhabit.evaluation.runner import INFRA_STATUSES, EvalError, discover_tasks, run_eval
        from inhabit.harness.config import HarnessConfig
        from inhabit.sandbox import SandboxConfig, create_provider

        SANDBOX_BACKENDS.check(backend, local_only=True)
        if tool_format not in ("auto", "xml", "native"):
            raise typer.BadParameter("choose auto, xml or native", param_hint="--tool-format")
        try:
            task_list = discover_tasks(tasks)
        except EvalError as e:
            raise typer.BadParameter(str(e), param_hint="--tasks") from e
        overrides = {"max_turns": max_turns, "max_turn_tokens": max_turn_tokens, "tool_format": tool_format}
        try:
            harness = HarnessConfig(**{k: v for k, v in overrides.items() if v is not None})
        except ValidationError as e:  # e.g. --max-turn-tokens 8: one line naming the option
            err = e.errors()[0]
            option = "--" + str(err["loc"][0]).replace("_", "-") if err.get("loc") else None
            raise typer.BadParameter(err["msg"], param_hint=option) from None
        composer = None
        if reward_config is not None:
            from inhabit.config import load_config
            from inhabit.rewards.compose import RewardComposer, RewardConfig

            composer = RewardComposer(load_config(RewardConfig, reward_config))
        records_path = out.with_suffix(".records.jsonl")

        async def run():
            from rich.progress import Progress

            from inhabit.inference.policies import make_policy

            # K greedy samples would be K copies of one answer: pass@K needs sampling.
            temp = temperature if temperature is not None else (0.0 if samples == 1 else 0.8)
            policy = make_policy(model, model_name=served_name, temperature=temp, seed=seed, api_key=api_key)
            if tool_format != "xml" and hasattr(policy, "probe_tools"):
                await policy.probe_tools()  # an endpoint: does it parse its model's own calls?
            provider = create_provider(SandboxConfig(backend=backend))
            try:
                with Progress() as bar:
                    from inhabit.evaluation.runner import done_records, read_records

                    done = len(done_records(read_records(records_path))) if resume else 0
                    bid = bar.add_task("eval", total=len(task_list) * samples, completed=done)
                    return await run_eval(
                        task_list, policy, provider, records_path, samples=samples, concurrency=concurrency,
                        resume=resume, harness=harness, save_trajectories=trajectories, composer=composer,
                        on_record=lambda r: bar.advance(bid),
                    )  # fmt: skip
            finally:
                if composer is not None:
                    await composer.close()
                await provider.close()
                await policy.close()

        try:
            records = asyncio.run(run())
        except EvalError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from e
        summary = summarize(records, k=samples)
        summary |= {"model": model, "tasks_dir": str(tasks), "records": str(records_path),
                    "temperature": temperature if temperature is not None else (0.0 if samples == 1 else 0.8)}  # fmt: skip
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(summary, indent=1))
        print_summary(summary, f"inhabit eval: {model} on {tasks}")
        typer.echo(f"wrote {out} and {records_path}")
        failed = [r for r in records if r.get("status") in INFRA_STATUSES]
        if failed:
            typer.secho(
                f"error: {len(failed)} of {len(records)} samples failed for infrastructure reasons, not the "
                f"model's (first: {failed[0]['status']}: {failed[0].get('error')}); run the same command "
                "with --resume to run them again",
                fg=typer.colors.RED,
                err=True,
            )
            raise typer.Exit(1)
