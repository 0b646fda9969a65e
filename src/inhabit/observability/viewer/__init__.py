"""`inhabit view`: a read-only web viewer of run folders (curves, episodes, evaluations).

`app.create_app(paths, token)` builds the FastAPI app; `runs` finds run folders and reads their
files, `index` keeps an incremental index of trajectories.jsonl, `episode` prepares one episode's
page. Templates and static assets live beside this file; the chart library's JS is served from the
installed `plotly` package (docs/viewer.md).
"""
