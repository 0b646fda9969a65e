// Curves of one or more runs, drawn with Plotly and kept up to date by polling each run's
// /api/run/<id>/metrics?offset=N (only the lines appended since the last poll come back).
"use strict";

const POLL_MS = 2000;

function chartFor(charts, key) {
  for (const [title, pattern] of charts) {
    if (new RegExp(pattern).test(key)) return title;
  }
  return null;
}

function setupCurves(root) {
  const runs = JSON.parse(root.dataset.runs);
  const charts = JSON.parse(root.dataset.charts);
  const state = {};            // run -> {offset, series: {key: {x: [], y: []}}}
  const divs = {};             // chart title -> div
  for (const run of runs) state[run] = { offset: 0, series: {} };

  function draw(title) {
    let div = divs[title];
    if (!div) {
      div = document.createElement("div");
      div.className = "chart";
      div.dataset.title = title;
      // keep the declared order of charts
      const order = charts.map((c) => c[0]);
      const after = Object.keys(divs).filter((t) => order.indexOf(t) > order.indexOf(title));
      const next = after.length ? divs[after.sort((a, b) => order.indexOf(a) - order.indexOf(b))[0]] : null;
      root.insertBefore(div, next);
      divs[title] = div;
    }
    const traces = [];
    for (const run of runs) {
      for (const [key, s] of Object.entries(state[run].series)) {
        if (chartFor(charts, key) !== title) continue;
        traces.push({ x: s.x, y: s.y, name: runs.length > 1 ? `${run}: ${key}` : key, mode: "lines+markers", type: "scatter" });
      }
    }
    const points = traces.reduce((n, t) => n + t.x.length, 0);
    div.dataset.points = String(points);
    Plotly.react(div, traces, {
      title: { text: title, font: { size: 13 } }, margin: { l: 40, r: 10, t: 30, b: 30 },
      xaxis: { title: { text: "step" } }, legend: { font: { size: 10 } }, showlegend: true,
    }, { displayModeBar: false, responsive: true });
  }

  async function poll(run) {
    const st = state[run];
    const resp = await fetch(`/api/run/${encodeURIComponent(run)}/metrics?offset=${st.offset}`);
    if (!resp.ok) return;
    const data = await resp.json();
    st.offset = data.offset;
    const touched = new Set();
    for (const p of data.points) {
      for (const [key, value] of Object.entries(p)) {
        if (key === "step") continue;
        const title = chartFor(charts, key);
        if (title === null) continue;
        const s = st.series[key] || (st.series[key] = { x: [], y: [] });
        s.x.push(p.step);
        s.y.push(value);
        touched.add(title);
      }
    }
    for (const title of touched) draw(title);
  }

  async function loop() {
    for (const run of runs) {
      try { await poll(run); } catch (e) { /* the server went away: try again next round */ }
    }
    root.dataset.polls = String(Number(root.dataset.polls || 0) + 1);
    setTimeout(loop, POLL_MS);
  }
  loop();
}

document.querySelectorAll(".curves").forEach(setupCurves);
