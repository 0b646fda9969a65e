"""The viewer's web app: server-rendered pages over run folders, and one JSON endpoint for curves.

Pages: `/` (runs), `/run/{id}` (curves, evaluations, config), `/run/{id}/episodes` (the filtered,
sorted, paginated table), `/run/{id}/episode/{n}` (one episode), `/compare?runs=a&runs=b` (curves
of several runs overlaid), `/run/{id}/specialize` (the report of an `inhabit specialize` run). `/api/run/{id}/metrics?offset=N` returns the metric points appended
since byte N of metrics.jsonl, which the curves poll while a run is live.

Read-only, and no URL names a file: runs are looked up by id among those given at start, episodes
by their number in the index, static assets by name in a fixed table. Templates autoescape, so
model output and observations are text on the page. With a token (required off loopback), every
request must carry it: `?token=` once (then a cookie), or `Authorization: Bearer`.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader

from inhabit.observability.viewer import episode as ep
from inhabit.observability.viewer.index import SORT_KEYS, Filters
from inhabit.observability.viewer.runs import Run, make_runs, points, read_metrics

HERE = Path(__file__).parent
PER_PAGE = 50
COOKIE = "inhabit_view_token"

CHARTS: list[tuple[str, str]] = [
    ("Reward", r"^reward\.(mean|min|max|std)$"),
    ("Success", r"^success_rate$|^eval\.[^.]+\.success_rate$"),
    ("Staleness and version lag", r"^policy_version_lag\.|^groups\.dropped_stale|^version$|^engine_version$"),
    ("Engine/trainer mismatch", r"mismatch"),
    ("Importance ratio", r"ratio"),
    ("MoE routing disagreement", r"routing|router"),
    ("Hack flags", r"^flags?\.|hack"),
    ("Loss and gradients", r"loss$|grad_norm|entropy|clip_fraction"),
    ("Throughput", r"tokens_per_s|trajectories_per_min|engine_decode_batch_mean"),
    ("Trainer idle", r"trainer_idle|train_s$"),
    ("Episode status", r"^status\.|^failed$"),
    ("Groups", r"^groups\.|^samples$|^updated$"),
]
"""Curves drawn (title, regex over dotted metric names); a name matching none is not drawn."""


def _static_files() -> dict[str, Path]:
    files = {"viewer.css": HERE / "static" / "viewer.css", "viewer.js": HERE / "static" / "viewer.js"}
    try:  # the chart library ships its own JS inside its wheel: served from there, never a CDN
        import plotly

        files["plotly.min.js"] = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    except ImportError:
        pass
    return files


def _num(v: str | None, cast: type = float) -> Any:
    if v is None or v.strip() == "":
        return None
    try:
        return cast(v)
    except ValueError:
        raise HTTPException(400, f"not a number: {v!r}") from None


def create_app(paths: list[Path], token: str | None = None) -> FastAPI:
    """The viewer over the run folders in (or under) `paths`."""
    runs = make_runs(paths)
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True)
    env.filters["tojson_attr"] = lambda v: json.dumps(v)
    static = _static_files()
    app = FastAPI(title="inhabit view", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Response:
        if token is None:
            return await call_next(request)
        given = request.query_params.get("token")
        header = request.headers.get("authorization", "")
        sent = given or request.cookies.get(COOKIE) or (header[7:] if header.startswith("Bearer ") else "")
        if not secrets.compare_digest(sent.encode(), token.encode()):
            return Response("a token is required: open the address with ?token=...", 401)
        if given:  # swap the token in the address for a cookie, so it leaves the address bar
            resp = RedirectResponse(request.url.remove_query_params("token"), 303)
            resp.set_cookie(COOKIE, token, httponly=True, samesite="strict")
            return resp
        return await call_next(request)

    def render(name: str, **ctx: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(name).render(**ctx))

    def run_or_404(rid: str) -> Run:
        if rid not in runs:
            raise HTTPException(404, f"no run {rid!r}")
        return runs[rid]

    @app.get("/static/pygments.css")
    def pygments_css() -> Response:
        from pygments.formatters import HtmlFormatter

        return Response(HtmlFormatter(style="default").get_style_defs(".hl"), media_type="text/css")

    @app.get("/static/{name}")
    def static_file(name: str) -> FileResponse:
        if name not in static or not static[name].is_file():
            raise HTTPException(404, "no such asset")
        return FileResponse(static[name])

    @app.get("/", response_class=HTMLResponse)
    def runs_page() -> HTMLResponse:
        rows = [
            {
                "run": r,
                "status": r.status(),
                "steps": r.steps_done(),
                "best": r.best_success(),
                "config": r.config_summary(),
            }
            for r in runs.values()
        ]
        return render("runs.jinja", rows=rows)

    @app.get("/run/{rid}", response_class=HTMLResponse)
    def run_page(rid: str) -> HTMLResponse:
        run = run_or_404(rid)
        return render(
            "run.jinja",
            run=run,
            status=run.status(),
            config=run.config_summary(),
            evals=run.evaluations(),
            charts=CHARTS,
        )

    @app.get("/run/{rid}/specialize", response_class=HTMLResponse)
    def specialize_page(rid: str) -> HTMLResponse:
        run = run_or_404(rid)
        report = run.specialize_report()
        if report is None:
            raise HTTPException(404, f"run {rid!r} is not an `inhabit specialize` run with a report")
        return render("specialize.jinja", run=run, r=report)

    @app.get("/compare", response_class=HTMLResponse)
    def compare_page(runs_: list[str] = Query([], alias="runs")) -> HTMLResponse:
        chosen = [run_or_404(r) for r in runs_]
        if not chosen:
            chosen = list(runs.values())[:2]
        return render("compare.jinja", chosen=chosen, charts=CHARTS)

    @app.get("/api/run/{rid}/metrics")
    def metrics_api(rid: str, offset: int = 0) -> JSONResponse:
        run = run_or_404(rid)
        records, next_offset = read_metrics(run.path / "metrics.jsonl", max(0, offset))
        return JSONResponse({"offset": next_offset, "points": points(records), "status": run.status()})

    @app.get("/run/{rid}/episodes", response_class=HTMLResponse)
    def episodes_page(
        request: Request,
        rid: str,
        task: str = "",
        status: str = "",
        purpose: str = "",
        flag: str = "",
        first_tool: str = "",
        reward_min: str | None = None,
        reward_max: str | None = None,
        version_min: str | None = None,
        version_max: str | None = None,
        sort: str = "n",
        desc: int = 0,
        page: int = 1,
    ) -> HTMLResponse:
        run = run_or_404(rid)
        run.index.refresh()
        filters = Filters(
            task=task, status=status, purpose=purpose, flag=flag, first_tool=first_tool,
            reward_min=_num(reward_min), reward_max=_num(reward_max),
            version_min=_num(version_min, int), version_max=_num(version_max, int),
        )  # fmt: skip
        sort = sort if sort in SORT_KEYS else "n"
        rows, total = run.index.query(filters, sort, bool(desc), max(1, page), PER_PAGE)
        params = {k: v for k, v in request.query_params.items() if k not in ("page", "sort", "desc", "token")}
        return render(
            "episodes.jinja",
            run=run,
            rows=rows,
            total=total,
            indexed=len(run.index.rows),
            page=max(1, page),
            pages=max(1, -(-total // PER_PAGE)),
            f=filters,
            sort=sort,
            desc=bool(desc),
            params=params,
            choices=run.index.choices(),
            sort_keys=SORT_KEYS,
        )

    @app.get("/run/{rid}/episode/{n}", response_class=HTMLResponse)
    def episode_page(rid: str, n: int) -> HTMLResponse:
        run = run_or_404(rid)
        run.index.refresh()
        if not 0 <= n < len(run.index.rows):
            raise HTTPException(404, f"run {rid!r} has no episode {n}")
        record = run.index.record(n)
        task_id = str(record.get("task_id", ""))
        workspace = run.task_workspace(task_id) if re.fullmatch(r"[\w.-]+", task_id) else None
        diffs, diff_note = ep.final_diff(record, workspace)
        return render(
            "episode.jinja",
            run=run,
            n=n,
            row=run.index.rows[n],
            total=len(run.index.rows),
            r=record,
            segments=ep.turns(record, run.tokenizer_file()),
            diffs=diffs,
            diff_note=diff_note,
            tests=ep.grading_rows(record),
            flags=ep.flags(record),
        )

    return app
