"""Benchmark: sandbox create/exec/snapshot/restore/burst against the naive baseline, in one run.

Workspace: ~5,000 files / ~50 MB on disk (the temp dir). Baseline, measured in the same run:
`cp -a` of the workspace into the same scratch tmpfs plus a plain subprocess, `rm -rf` to
discard. Measured for the sandbox backend (default: auto = bwrap):
- create from a snapshot, p50/p99 (and the first create from the directory);
- exec of `python3 -c pass` versus the same interpreter run bare (p50 ratio);
- snapshot (after a small write) and restore latency;
- discard (close) time versus `rm -rf` of the baseline copy;
- burst: sandboxes per second that are created, run one command (`true`) and are destroyed,
  with 32 in flight (an in-bench loop; with `--pool`, also through `SandboxPool` if present);
- with a task environment mounted (`inhabit.envs`, one holding pytest, built offline in a temp
  store first): create p50 and the exec of `python -c pass` (the environment's interpreter).

Goals (issue 2, on a 2-core machine): create p50 < 20 ms and >= 10x faster than the baseline;
exec overhead < 2x bare python3; burst >= 50 sandboxes/s; with an environment mounted, create
p50 < 2 ms.

bwrap only, the supervisor (issue 16 §2: one bwrap per sandbox, each exec a fork inside it) against
one bwrap per exec (`supervisor=False`), in the same run: exec of `python3 -c pass` and `true`
in a long-lived sandbox (both paths and the bare interpreter interleaved), create p50, and the burst
(alternating rounds of `--burst` sandboxes each, `--burst-rounds` of them, the median round
reported; also with the supervisor started by each sandbox's first exec,
`supervise_after=0`, rather than its second). Goals: exec <= 1.3x bare; burst >= 200 sandboxes/s with 32 in flight;
create p50 < 2 ms. The A/B bursts also report the CPU each sandbox cost (inhabit's process, and
the processes it started: launcher, bwrap, the command), which bounds the burst rate: 200/s on
two cores leaves 10 ms in all; and, as root, the same burst with bwrap started from the host's
mount table instead of the provider's launch namespace (`launch_namespace=False`), and through
the shell launcher instead of the compiled one (`compiled_launcher=False`, where that is built).
Prints tables and writes bench/results/sandbox.json. Timings on a shared machine are noisy:
compare within one run.

    PYTHONPATH=src .venv/bin/python bench/sandbox.py [--backend auto] [--files 5000] [--mb 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inhabit.sandbox import SandboxConfig, SandboxLimits, create_provider
from inhabit.sandbox.hostfs import default_scratch_dir


def make_workspace(root: Path, files: int, total_mb: int) -> Path:
    ws = root / "workspace"
    size = max(1, total_mb * 1024 * 1024 // files)
    blob = os.urandom(size)
    for i in range(files):
        d = ws / f"pkg{i % 50}" / f"sub{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.py").write_bytes(blob[i % 97 :] + blob[: i % 97])
    return ws


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def ms(x: float) -> float:
    return round(x * 1000, 2)


async def run_proc(*argv: str, cwd: str | None = None) -> int:
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await proc.wait()


async def baseline(ws: Path, scratch: Path, n: int, burst: int, python: str) -> dict[str, float]:
    """cp -a + plain subprocess + rm -rf, the naive way to give each rollout a workspace."""
    creates, discards, execs = [], [], []
    for i in range(n):
        dst = scratch / f"copy{i}"
        t = time.perf_counter()
        await run_proc("cp", "-a", str(ws), str(dst))
        creates.append(time.perf_counter() - t)
        t = time.perf_counter()
        await run_proc(python, "-c", "pass", cwd=str(dst))
        execs.append(time.perf_counter() - t)
        t = time.perf_counter()
        await run_proc("rm", "-rf", str(dst))
        discards.append(time.perf_counter() - t)
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            dst = scratch / f"burst{i}"
            await run_proc("cp", "-a", str(ws), str(dst))
            await run_proc("true", cwd=str(dst))
            await run_proc("rm", "-rf", str(dst))

    t = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(burst)))
    rate = burst / (time.perf_counter() - t)
    return {
        "create_p50_ms": ms(pct(creates, 0.5)),
        "create_p99_ms": ms(pct(creates, 0.99)),
        "exec_p50_ms": ms(pct(execs, 0.5)),
        "discard_p50_ms": ms(pct(discards, 0.5)),
        "burst_per_s": round(rate, 1),
    }


async def measure(
    backend: str, ws: Path, n: int, burst: int, python: str, use_pool: bool, rounds: int
) -> dict:
    provider = create_provider(SandboxConfig(backend=backend, limits=SandboxLimits()))  # type: ignore[arg-type]
    bwrap = hasattr(provider, "supervise")
    res = await _measure(provider, ws, n, burst, python, use_pool)
    if bwrap:  # the supervisor against one bwrap per exec, in this run
        res |= await supervisor_ab(ws, n, burst, python, rounds)
    return res


async def supervisor_ab(ws: Path, n: int, burst: int, python: str, rounds: int) -> dict:
    """The bwrap supervisor against one bwrap per exec: interleaved execs, alternating bursts."""
    provs = {
        k: create_provider(SandboxConfig(backend="bwrap", limits=SandboxLimits(), supervisor=k == "sup"))
        for k in ("sup", "per_exec")
    }
    out: dict = {}
    try:
        snaps, seeds = {}, {}
        for k, prov in provs.items():
            seeds[k] = await prov.create(ws)
            snaps[k] = await seeds[k].snapshot()
            creates = []
            for _ in range(n):
                t = time.perf_counter()
                sb = await prov.create(snaps[k])
                creates.append(time.perf_counter() - t)
                await sb.close()
            out[f"ab_{k}_create_p50_ms"] = ms(pct(creates, 0.5))
        times: dict[str, list[float]] = {
            "sup": [],
            "per_exec": [],
            "bare": [],
            "sup_true": [],
            "per_exec_true": [],
        }
        for k in ("sup", "per_exec"):
            for _ in range(3):
                await seeds[k].exec(["python3", "-c", "pass"])  # warm caches (and the supervisor)
        for _ in range(n):
            for k in ("sup", "per_exec"):
                t = time.perf_counter()
                r = await seeds[k].exec(["python3", "-c", "pass"])
                times[k].append(time.perf_counter() - t)
                assert r.ok, r
                t = time.perf_counter()
                await seeds[k].exec(["true"])
                times[f"{k}_true"].append(time.perf_counter() - t)
            t = time.perf_counter()
            await run_proc(python, "-c", "pass")
            times["bare"].append(time.perf_counter() - t)
        for k, xs in times.items():
            out[f"ab_{k}_exec_p50_ms"] = ms(pct(xs, 0.5))
        for sb in seeds.values():
            await sb.close()
        # And the supervisor started by every sandbox's first exec (why it is not the default).
        from inhabit.sandbox.bwrap import BwrapSandboxProvider

        provs["sup0"] = BwrapSandboxProvider(limits=SandboxLimits(), supervise_after=0)
        snaps["sup0"] = await (await provs["sup0"].create(ws)).snapshot()
        # And bwrap started from the host's mount table rather than the provider's launch
        # namespace (as root; see inhabit.sandbox.launchns), the default otherwise.
        provs["host_table"] = BwrapSandboxProvider(limits=SandboxLimits(), launch_namespace=False)
        snaps["host_table"] = await (await provs["host_table"].create(ws)).snapshot()
        # And bwrap started through the shell launcher (sh + nsenter + env) rather than the
        # compiled one (as root, where it is built; see inhabit/sandbox/_launcher.c).
        if getattr(provs["sup"], "launcher", None) is not None:
            provs["shell_launcher"] = BwrapSandboxProvider(limits=SandboxLimits(), compiled_launcher=False)
            snaps["shell_launcher"] = await (await provs["shell_launcher"].create(ws)).snapshot()
        out["ab_launch_namespace"] = provs["sup"].launch_ns is not None  # type: ignore[attr-defined]
        out["host_mounts"] = len(Path("/proc/self/mountinfo").read_text().splitlines())
        # Whole bursts of `burst` sandboxes each, the paths alternating round by round, and the
        # median round reported: one short burst on a shared machine is mostly noise.
        rates: dict[str, list[tuple[float, float, float]]] = {k: [] for k in provs}
        for _ in range(rounds):
            for k, prov in provs.items():
                rates[k].append(await _burst_cpu(prov, snaps[k], burst))
        for k, xs in rates.items():
            out[f"ab_{k}_burst_per_s"] = round(statistics.median(x[0] for x in xs), 1)
            out[f"ab_{k}_burst_range"] = [round(min(x[0] for x in xs), 1), round(max(x[0] for x in xs), 1)]
            out[f"ab_{k}_burst_cpu_ms_inhabit"] = round(statistics.median(x[1] for x in xs), 2)
            out[f"ab_{k}_burst_cpu_ms_children"] = round(statistics.median(x[2] for x in xs), 2)
        out["ab_counts"] = {k: dict(prov.exec_counts) for k, prov in provs.items()}  # type: ignore[attr-defined]
    finally:
        for prov in provs.values():
            await prov.close()
    return out


async def _burst(provider, snap: str, count: int) -> float:  # type: ignore[no-untyped-def]
    """Sandboxes per second that are created, run `true` and are closed, 32 in flight."""
    return (await _burst_cpu(provider, snap, count))[0]


def _cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process, and of its children that have been reaped
    (bwrap and everything it started: each parent adds its reaped children's time to its own)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


async def _burst_cpu(provider, snap: str, count: int) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """`_burst`, and the CPU milliseconds each sandbox cost inhabit and the processes it started.

    On two cores, 200 sandboxes/s leaves 10 ms of CPU per sandbox in all. Not counted: kernel
    work done outside these processes (the kernel frees a network namespace in a worker thread).
    """
    sem = asyncio.Semaphore(32)

    async def one() -> None:
        async with sem:
            sb = await provider.create(snap)
            try:
                await sb.exec(["true"])
            finally:
                await sb.close()

    t, (own, kids) = time.perf_counter(), _cpu()
    await asyncio.gather(*(one() for _ in range(count)))
    rate = count / (time.perf_counter() - t)
    own2, kids2 = _cpu()
    return rate, 1000 * (own2 - own) / count, 1000 * (kids2 - kids) / count


async def _measure(provider, ws: Path, n: int, burst: int, python: str, use_pool: bool) -> dict:  # type: ignore[no-untyped-def]
    out: dict = {"backend": type(provider).__name__}
    if hasattr(provider, "describe"):
        out["describe"] = provider.describe()
    try:
        t = time.perf_counter()
        seed = await provider.create(ws)
        out["create_from_dir_ms"] = ms(time.perf_counter() - t)
        snap = await seed.snapshot()
        creates, discards = [], []
        for _ in range(n):
            t = time.perf_counter()
            sb = await provider.create(snap)
            creates.append(time.perf_counter() - t)
            await sb.write_file("scratch.txt", "x" * 1000)
            t = time.perf_counter()
            await sb.close()
            discards.append(time.perf_counter() - t)
        out["create_p50_ms"] = ms(pct(creates, 0.5))
        out.update(await _with_env(provider, snap, n))
        out["create_p99_ms"] = ms(pct(creates, 0.99))
        out["discard_p50_ms"] = ms(pct(discards, 0.5))

        # exec overhead: interleave sandboxed and bare runs of the same interpreter.
        inside, bare = [], []
        await seed.exec(["python3", "-c", "pass"])  # warm caches
        for _ in range(n):
            t = time.perf_counter()
            r = await seed.exec(["python3", "-c", "pass"])
            inside.append(time.perf_counter() - t)
            assert r.ok, r
            t = time.perf_counter()
            await run_proc(python, "-c", "pass")
            bare.append(time.perf_counter() - t)
        out["exec_p50_ms"] = ms(pct(inside, 0.5))
        out["bare_python_p50_ms"] = ms(pct(bare, 0.5))
        out["exec_true_p50_ms"] = ms(statistics.median([await _timed(seed.exec(["true"])) for _ in range(n)]))

        snaps, restores = [], []
        for i in range(n):
            await seed.write_file(f"s/{i}.txt", str(i))
            t = time.perf_counter()
            sid = await seed.snapshot()
            snaps.append(time.perf_counter() - t)
            t = time.perf_counter()
            await seed.restore(sid if i % 2 else snap)
            restores.append(time.perf_counter() - t)
        out["snapshot_p50_ms"] = ms(pct(snaps, 0.5))
        out["restore_p50_ms"] = ms(pct(restores, 0.5))
        await seed.close()

        out["burst_per_s"] = round(await _burst(provider, snap, burst), 1)
        if use_pool:
            out.update(await _pool_burst(provider, snap, burst))
    finally:
        await provider.close()
    return out


def _build_env() -> Path:
    """A task environment holding pytest only, built offline (inhabit's own wheels) in a temp store."""
    from inhabit.envs.lock import env_id, lock_requirements, own_python
    from inhabit.envs.store import EnvStore

    tmp = Path(tempfile.mkdtemp(prefix="inhabit-bench-env-"))
    os.environ["INHABIT_CACHE_DIR"] = str(tmp / "cache")
    (tmp / "wheels").mkdir()
    text = lock_requirements([], wheelhouse=tmp / "wheels")
    (tmp / "lock").write_text(text)
    return (
        EnvStore(tmp / "store")
        .ensure(env_id(own_python(), text.encode()), tmp / "lock", wheelhouse=tmp / "wheels")
        .path
    )


async def _with_env(provider, snap: str, n: int) -> dict:  # type: ignore[no-untyped-def]
    env = await asyncio.to_thread(_build_env)
    try:
        return await _env_rows(provider, snap, n, env)
    finally:
        from inhabit.envs.store import EnvStore

        EnvStore(env.parent).prune()
        shutil.rmtree(env.parent.parent, ignore_errors=True)


async def _env_rows(provider, snap: str, n: int, env: Path) -> dict:  # type: ignore[no-untyped-def]
    creates, execs = [], []
    sb = await provider.create(snap, env=env)  # first use binds the environment once
    await sb.close()
    for _ in range(n):
        t = time.perf_counter()
        sb = await provider.create(snap, env=env)
        creates.append(time.perf_counter() - t)
        t = time.perf_counter()
        r = await sb.exec(["python", "-c", "pass"])
        execs.append(time.perf_counter() - t)
        assert r.ok, r
        await sb.close()
    return {"env_create_p50_ms": ms(pct(creates, 0.5)), "env_exec_p50_ms": ms(pct(execs, 0.5))}


async def _timed(coro) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    await coro
    return time.perf_counter() - t


async def _pool_burst(provider, snap: str, burst: int) -> dict:  # type: ignore[no-untyped-def]
    try:
        from inhabit.sandbox.pool import SandboxPool
    except ImportError:
        return {"pool_burst_per_s": None}
    sem = asyncio.Semaphore(32)
    async with SandboxPool(provider, snap, size=32) as pool:
        await asyncio.sleep(0.5)  # let it warm up

        async def one() -> None:
            async with sem, pool.acquire() as sb:
                await sb.exec(["true"])

        t = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(burst)))
        return {"pool_burst_per_s": round(burst / (time.perf_counter() - t), 1)}


def report(res: dict, base: dict, meta: dict) -> dict:
    ratios = {
        "create_speedup_vs_cp": round(base["create_p50_ms"] / res["create_p50_ms"], 1),
        "exec_overhead_vs_bare": round(res["exec_p50_ms"] / res["bare_python_p50_ms"], 2),
        "discard_speedup_vs_rm": round(base["discard_p50_ms"] / max(res["discard_p50_ms"], 1e-3), 1),
        "burst_speedup_vs_baseline": round(res["burst_per_s"] / base["burst_per_s"], 1),
    }
    goals = {
        "create p50 < 20 ms": res["create_p50_ms"] < 20,
        "create >= 10x baseline": ratios["create_speedup_vs_cp"] >= 10,
        "exec overhead < 2x bare python3": ratios["exec_overhead_vs_bare"] < 2,
        "burst >= 50 sandboxes/s": res["burst_per_s"] >= 50,
        "create p50 < 2 ms with an environment mounted": res["env_create_p50_ms"] < 2,
    }
    t = Table(
        title=f"sandbox bench: {res['backend']} vs cp -a + subprocess ({meta['files']} files, {meta['mb']} MB)"
    )
    t.add_column("metric")
    t.add_column("inhabit", justify="right")
    t.add_column("baseline", justify="right")
    t.add_column("ratio", justify="right")
    rows = [
        (
            "create p50 (ms)",
            res["create_p50_ms"],
            base["create_p50_ms"],
            f"{ratios['create_speedup_vs_cp']}x faster",
        ),
        ("create p99 (ms)", res["create_p99_ms"], base["create_p99_ms"], ""),
        ("first create from directory (ms)", res["create_from_dir_ms"], "", ""),
        (
            "exec python3 -c pass p50 (ms)",
            res["exec_p50_ms"],
            res["bare_python_p50_ms"],
            f"{ratios['exec_overhead_vs_bare']}x bare",
        ),
        ("exec true p50 (ms)", res["exec_true_p50_ms"], "", ""),
        ("create p50, environment mounted (ms)", res["env_create_p50_ms"], res["create_p50_ms"], ""),
        (
            "exec python -c pass p50, environment mounted (ms)",
            res["env_exec_p50_ms"],
            res["bare_python_p50_ms"],
            f"{round(res['env_exec_p50_ms'] / res['bare_python_p50_ms'], 2)}x bare",
        ),
        ("snapshot p50 (ms)", res["snapshot_p50_ms"], "", ""),
        ("restore p50 (ms)", res["restore_p50_ms"], "", ""),
        (
            "discard p50 (ms)",
            res["discard_p50_ms"],
            base["discard_p50_ms"],
            f"{ratios['discard_speedup_vs_rm']}x faster",
        ),
        (
            "burst, 32 in flight (sandboxes/s)",
            res["burst_per_s"],
            base["burst_per_s"],
            f"{ratios['burst_speedup_vs_baseline']}x",
        ),
    ]
    if "pool_burst_per_s" in res:
        rows.append(("burst via SandboxPool (sandboxes/s)", res["pool_burst_per_s"], "", ""))
    for name, a, b, r in rows:
        t.add_row(name, str(a), str(b), r)
    console = Console()
    console.print(t)
    for goal, met in goals.items():
        console.print(f"  {'[green]met[/]' if met else '[red]NOT met[/]'}  {goal}")
    if "ab_sup_exec_p50_ms" in res:
        goals |= supervisor_report(res, console)
    return {"meta": meta, "inhabit": res, "baseline": base, "ratios": ratios, "goals_met": goals}


def supervisor_report(res: dict, console: Console) -> dict[str, bool]:
    """The supervisor A/B table (bwrap) and the goals of issue 16 §2."""
    bare = res["ab_bare_exec_p50_ms"]
    t = Table(title="bwrap: supervisor (one bwrap per sandbox) vs one bwrap per exec, same run")
    for col in ("metric", "supervisor", "per-exec bwrap", "bare"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    sup, old = res["ab_sup_exec_p50_ms"], res["ab_per_exec_exec_p50_ms"]
    t.add_row(
        "exec python3 -c pass p50 (ms)",
        f"{sup} ({round(sup / bare, 2)}x bare)",
        f"{old} ({round(old / bare, 2)}x bare)",
        str(bare),
    )
    t.add_row(
        "exec true p50 (ms)",
        str(res["ab_sup_true_exec_p50_ms"]),
        str(res["ab_per_exec_true_exec_p50_ms"]),
        "",
    )
    t.add_row("create p50 (ms)", str(res["ab_sup_create_p50_ms"]), str(res["ab_per_exec_create_p50_ms"]), "")
    t.add_row(
        "burst, 32 in flight (sandboxes/s): median round [slowest, fastest]",
        f"{res['ab_sup_burst_per_s']} {res['ab_sup_burst_range']}",
        f"{res['ab_per_exec_burst_per_s']} {res['ab_per_exec_burst_range']}",
        "",
    )
    t.add_row("burst, supervisor from the first exec (sandboxes/s)", str(res["ab_sup0_burst_per_s"]), "", "")
    if "ab_host_table_burst_per_s" in res:
        t.add_row(
            f"burst, bwrap from the host's table ({res['host_mounts']} mounts) (sandboxes/s)",
            f"{res['ab_host_table_burst_per_s']} ({res['ab_host_table_burst_cpu_ms_inhabit']} + "
            f"{res['ab_host_table_burst_cpu_ms_children']} ms)",
            "",
            "",
        )
    if "ab_shell_launcher_burst_per_s" in res:
        t.add_row(
            "burst, bwrap through the shell launcher (sandboxes/s)",
            f"{res['ab_shell_launcher_burst_per_s']} ({res['ab_shell_launcher_burst_cpu_ms_inhabit']} + "
            f"{res['ab_shell_launcher_burst_cpu_ms_children']} ms)",
            "",
            "",
        )
    t.add_row(
        "burst: CPU per sandbox, inhabit + what it started (ms)",
        f"{res['ab_sup_burst_cpu_ms_inhabit']} + {res['ab_sup_burst_cpu_ms_children']}",
        f"{res['ab_per_exec_burst_cpu_ms_inhabit']} + {res['ab_per_exec_burst_cpu_ms_children']}",
        "",
    )
    console.print(t)
    goals = {
        "supervisor: exec python3 -c pass <= 1.3x bare": sup <= 1.3 * bare,
        "supervisor: burst >= 200 sandboxes/s with 32 in flight": res["ab_sup_burst_per_s"] >= 200,
        "supervisor: create p50 < 2 ms": res["ab_sup_create_p50_ms"] < 2,
    }
    for goal, met in goals.items():
        console.print(f"  {'[green]met[/]' if met else '[red]NOT met[/]'}  {goal}")
    console.print(f"  execs by path: {res['ab_counts']}")
    return goals


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto", choices=["auto", "bwrap", "process"])
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--n", type=int, default=40, help="repetitions per latency metric")
    ap.add_argument("--baseline-n", type=int, default=8)
    ap.add_argument("--burst", type=int, default=200)
    ap.add_argument("--baseline-burst", type=int, default=48)
    ap.add_argument(
        "--burst-rounds",
        type=int,
        default=5,
        help="bursts per path in the A/B table (the median is reported)",
    )
    ap.add_argument("--pool", action="store_true", help="also measure the burst through SandboxPool")
    ap.add_argument("--out", default="bench/results/sandbox.json")
    args = ap.parse_args()
    # The interpreter `python3` names inside the sandbox: the venv's (through its symlink, so the
    # bare run also starts as a venv, with the same site-packages).
    python = shutil.which("python3", path=f"{Path(sys.prefix).resolve()}/bin") or sys.executable
    with tempfile.TemporaryDirectory(prefix="inhabit-bench-") as tmp:
        ws = make_workspace(Path(tmp), args.files, args.mb)
        scratch = Path(tempfile.mkdtemp(prefix="inhabit-bench-base-", dir=default_scratch_dir()))
        try:
            base = await baseline(ws, scratch, args.baseline_n, args.baseline_burst, python)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        res = await measure(args.backend, ws, args.n, args.burst, python, args.pool, args.burst_rounds)
    meta = {
        "files": args.files,
        "mb": args.mb,
        "python": python,
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    data = report(res, base, meta)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    Console().print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
