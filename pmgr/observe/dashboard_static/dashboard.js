// pilot dashboard: draws what `pilot dashboard` (pmgr/observe/dashboard.py) pushes.
//
// One EventSource on /events (same origin; the token rides in the cookie the page's URL set):
//   state    the whole picture: pilots and partitions, units per state, units/s, failed units,
//            the node view, latest events, reconfigs (drawn as markers on the charts)
//   series   a change of the series: points from index `from` on replace ours (`reset`: all)
//   problem  a poll failed on the server (shown; the next poll tries again)
// The browser reconnects by itself when the stream ends; the server then sends everything.
// A reconfig is a POST of JSON to api/reconfig with the token in the X-Pilot-Token header.
"use strict";

const TOKEN = document.querySelector('meta[name="pilot-token"]').content;
const PALETTE = ["#0969da", "#bf3989", "#1a7f37", "#bc4c00", "#8250df", "#0a7a8a", "#9a6700",
  "#cf222e", "#57606a", "#116329"];
const STATE_COLOURS = {NEW: "#8c959f", SCHEDULING: "#8250df", QUEUED: "#0969da",
  EXECUTING: "#1a7f37", DONE: "#57606a", FAILED: "#cf222e", CANCELED: "#9a6700"};
const UNIT_STATES = ["NEW", "SCHEDULING", "QUEUED", "EXECUTING", "DONE", "FAILED", "CANCELED"];

let state = null;                   // the last state pushed
let series = {t: [], cols: {}, width: 1, kept: ""};
const charts = {};                  // id -> {plot, key}
const colours = {};                 // partition uid -> colour (stable while the page lives)

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k === "style") Object.assign(e.style, v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function colourOf(uid) {
  if (!(uid in colours)) colours[uid] = PALETTE[Object.keys(colours).length % PALETTE.length];
  return colours[uid];
}

function clock(ts) {
  return new Date(ts * 1000).toLocaleTimeString([], {hour12: false});
}

function short(uid) {  // pilot.0000.part.0002 -> part.0002
  const i = uid.indexOf(".part.");
  return i < 0 ? uid : uid.slice(i + 1);
}

function asked(a) {
  const parts = Object.entries(a || {}).map(([k, v]) => (k === "size" ? String(v) : `${k}=${v}`));
  return parts.join(",") || "-";
}

// -- the picture ---------------------------------------------------------------------------
function drawState() {
  document.getElementById("session").textContent = state.session;
  drawUnits();
  drawPilots();
  drawNodes();
  drawFailed();
  drawEvents();
  for (const c of Object.values(charts)) c.plot.redraw(false);  // (the reconfig markers)
}

function drawUnits() {
  const box = document.getElementById("units");
  const total = Object.values(state.units).reduce((a, b) => a + b, 0);
  const row = el("div", {class: "counts"},
    el("div", {class: "count", id: "units-total"}, el("b", {text: total.toLocaleString()}), "units"),
    el("div", {class: "count", id: "units-rate"},
      el("b", {text: state.rate.toLocaleString()}), "units/s now"));
  for (const s of UNIT_STATES) {
    if (!state.units[s]) continue;
    row.append(el("div", {class: `count state-${s}`, "data-state": s},
      el("b", {text: state.units[s].toLocaleString()}), s));
  }
  box.replaceChildren(row);
}

const boxes = {};                   // partition uid -> its stop checkbox (kept across draws)
const forms = {};                   // pilot uid -> its reconfig form (kept: typing survives)

function drawPilots() {
  const box = document.getElementById("pilots");
  const blocks = [el("h2", {text: "Pilots and partitions"})];
  if (!state.pilots.length) blocks.push(el("p", {class: "muted", text: "no pilot in this session yet"}));
  for (const p of state.pilots) {
    const size = p.size || {};
    const free = p.free ? `; free ${p.free.cores} cores, ${p.free.gpus} GPUs` : "";
    const how = p.live ? "live from the pilot" : `from the store (${p.note || "not running"})`;
    const head = el("h3", {},
      el("span", {text: p.uid + " "}), el("span", {class: `state-${p.state}`, text: p.state}),
      el("span", {class: "muted",
        text: `  ${size.nodes ?? "?"} node(s), ${size.cores ?? "?"} cores, ${size.gpus ?? "?"} GPUs${free} — ${how}`}));
    const table = el("table", {class: "partitions", "data-pilot": p.uid});
    table.append(el("thead", {}, el("tr", {},
      el("th", {text: "stop"}), el("th", {text: "partition"}), el("th", {text: "state"}),
      el("th", {text: "asked"}), el("th", {class: "num", text: "nodes"}),
      el("th", {class: "num", text: "cores busy"}), el("th", {class: "num", text: "GPUs busy"}),
      ...["QUEUED", "EXECUTING", "DONE", "FAILED", "CANCELED"].map((s) => el("th", {class: "num", text: s})),
      el("th", {text: "reason"}))));
    const body = el("tbody");
    for (const r of p.partitions) {
      const stop = boxes[r.uid] || (boxes[r.uid] = el("input", {type: "checkbox", value: r.uid,
        "data-pilot": p.uid, title: `stop ${r.uid}`}));
      stop.disabled = r.final || !p.live;
      if (stop.disabled) stop.checked = false;
      body.append(el("tr", {"data-uid": r.uid},
        el("td", {}, stop),
        el("td", {}, el("span", {class: "swatch", style: {background: colourOf(r.uid)}}), r.uid),
        el("td", {class: `state state-${r.state}`, text: r.state}),
        el("td", {class: "asked", text: asked(r.asked)}),
        el("td", {class: "num", text: r.nodes}),
        el("td", {class: "num cores", text: `${fmt(r.busy[0])}/${r.cores}`}),
        el("td", {class: "num gpus", text: `${fmt(r.busy[1])}/${r.gpus}`}),
        ...["QUEUED", "EXECUTING", "DONE", "FAILED", "CANCELED"].map((s) =>
          el("td", {class: `num units-${s}`, text: (r.units[s] || 0).toLocaleString()})),
        el("td", {class: "reason", text: r.reason || ""})));
    }
    table.append(body);
    const form = forms[p.uid] || (forms[p.uid] = reconfigForm(p.uid));
    form.querySelector("button").disabled = !p.live;
    blocks.push(el("div", {class: "pilot"}, head, table, form));
  }
  box.replaceChildren(...blocks);
}

function fmt(v) {
  return Number.isInteger(v) ? String(v) : v.toFixed(2);
}

function reconfigForm(pilot) {
  const start = el("input", {type: "text", class: "start", "data-pilot": pilot,
    placeholder: "50%  |  fill  |  cores=2,gpus=1  (several: separate with ;)"});
  const result = el("span", {class: "result", "data-pilot": pilot});
  const button = el("button", {type: "button", class: "do-reconfig", "data-pilot": pilot,
    text: "Reconfig"});
  button.addEventListener("click", () => reconfig(pilot, start, button, result));
  start.addEventListener("keydown", (e) => { if (e.key === "Enter") button.click(); });
  return el("div", {class: "reconfig"},
    el("label", {}, "start ", start),
    button,
    el("span", {class: "muted", text: "stops the partitions ticked above and starts the sizes given, as pilot reconfig --stop / --start"}),
    result);
}

async function reconfig(pilot, input, button, result) {
  const stop = [...document.querySelectorAll(`input[type=checkbox][data-pilot="${pilot}"]:checked`)]
    .map((c) => c.value);
  const start = input.value.split(";").map((s) => s.trim()).filter((s) => s);
  result.textContent = "sending…";
  result.classList.remove("error");
  button.disabled = true;
  try {
    const r = await fetch("api/reconfig", {
      method: "POST",
      headers: {"Content-Type": "application/json", "X-Pilot-Token": TOKEN},
      body: JSON.stringify({pilot, stop, start}),
      credentials: "same-origin",
    });
    const body = await r.json();
    if (r.ok) {
      const res = body.result || {};
      const started = (res.started || []).map((s) => `${s.uid} ${s.state}${s.reason ? ": " + s.reason : ""}`);
      result.textContent = `stopped: ${(res.stopped || []).join(", ") || "-"}; started: ${started.join(", ") || "-"}`;
      input.value = "";
      for (const uid of stop) boxes[uid].checked = false;
    } else {
      result.textContent = body.error || `HTTP ${r.status}`;
      result.classList.add("error");
    }
  } catch (e) {
    result.textContent = `not sent: ${e}`;
    result.classList.add("error");
  } finally {
    button.disabled = !(state && state.pilots.some((p) => p.uid === pilot && p.live));
  }
}

function drawNodes() {
  const box = document.getElementById("nodes");
  const blocks = [];
  for (const p of state.pilots) {
    const n = p.nodes;
    if (n.summary) {  // a pilot of many nodes: a cell per node, its shade how busy its cores are
      if (state.pilots.length > 1) blocks.push(el("div", {class: "legend", text: p.uid}));
      blocks.push(nodeSummary(n.summary));
      continue;
    }
    if (!n.nodes.length) continue;
    if (state.pilots.length > 1) blocks.push(el("div", {class: "legend", text: p.uid}));
    for (const node of n.nodes) {
      const cells = el("div", {class: "cells"});
      for (const [kind, list] of [["core", node.cores], ["gpu", node.gpus]]) {
        for (const [id, part, unit] of list) {
          const c = colourOf(part);
          cells.append(el("span", {
            class: `cell ${kind}${unit ? " busy" : ""}`,
            "data-part": part, "data-unit": unit || "",
            title: `${kind} ${id}: ${part}${unit ? ", " + unit : ", idle"}`,
            style: {borderColor: c, background: unit ? c : "#fff"},
          }));
        }
      }
      blocks.push(el("div", {class: "node", "data-node": node.name},
        el("span", {class: "name", text: node.name}), cells));
    }
    const more = [];
    if (n.total > n.nodes.length) more.push(`first ${n.nodes.length} of ${n.total} nodes`);
    if (more.length) blocks.push(el("div", {class: "legend", text: more.join("; ")}));
  }
  if (!blocks.length) blocks.push(el("p", {class: "muted", text: "no partition holds a node now"}));
  box.replaceChildren(...blocks);
}

function nodeSummary(rows) {
  // rows: [name, partition, cores, busy cores, GPUs, busy GPUs, ranks, state]
  const grid = el("div", {class: "nodegrid"});
  let cores = 0, busy = 0, gpus = 0, busyG = 0, ranks = 0, full = 0, idle = 0, down = 0;
  for (const [name, part, c, bc, g, bg, r, st] of rows) {
    const share = c ? bc / c : 0;
    const up = st === "up";
    if (up) {
      cores += c; busy += bc; gpus += g; busyG += bg; ranks += r;
      if (c && bc === c) full += 1; else if (!bc && !bg) idle += 1;
    } else down += 1;
    grid.append(el("span", {
      class: `ncell${up ? "" : " down"}`, "data-node": name, "data-part": part || "",
      title: `${name}: ${up ? `${bc}/${c} cores, ${bg}/${g} GPUs busy, ${r} ranks` : st}` +
        (part ? `, ${part}` : ""),
      style: {background: up ? `rgba(46, 139, 87, ${share ? 0.2 + 0.8 * share : 0.05})` : "#c33"},
    }));
  }
  const box = el("div", {class: "nodesummary"}, grid);
  box.append(el("div", {class: "legend", text:
    `${rows.length} nodes: ${rows.length - down} up${down ? `, ${down} down or given back` : ""}; ` +
    `${full} fully busy, ${rows.length - down - full - idle} partly, ${idle} idle; cores ` +
    `${busy.toLocaleString()}/${cores.toLocaleString()}, GPUs ${busyG}/${gpus}, ranks ` +
    `${ranks.toLocaleString()}`}));
  return box;
}

function drawFailed() {
  document.getElementById("failed-total").textContent =
    `(${state.failed_total.toLocaleString()} in all; the latest listed)`;
  const rows = state.failed.map((f) => el("tr", {"data-uid": f.uid},
    el("td", {text: f.uid}), el("td", {text: f.partition ? short(f.partition) : "-"}),
    el("td", {}, el("time", {text: clock(f.ts)})), el("td", {class: "reason", text: f.reason || ""})));
  document.querySelector("#failed tbody").replaceChildren(...rows);
}

function drawEvents() {
  const items = state.events.slice().reverse().map((e) =>
    el("li", {}, el("time", {text: clock(e.ts)}), e.text));
  document.getElementById("events").replaceChildren(...items);
}

// -- the series ----------------------------------------------------------------------------
function applySeries(ch) {
  if (ch.reset) series = {t: [], cols: {}};
  const k = ch.from;
  series.t = series.t.slice(0, k).concat(ch.t);
  for (const [name, values] of Object.entries(ch.cols)) {
    const had = series.cols[name] || new Array(k).fill(0);
    series.cols[name] = had.slice(0, k).concat(values);
  }
  series.width = ch.width;
  series.kept = ch.kept;
  document.getElementById("kept").textContent =
    `(means over ${ch.width} s; ${ch.kept}; dashed lines: reconfigs)`;
  drawCharts();
}

function partsIn(prefix) {
  return Object.keys(series.cols).filter((n) => n.startsWith(prefix)).map((n) => n.slice(prefix.length))
    .sort();
}

function markers(u) {  // the reconfigs, as dashed lines labelled where they happened
  if (!state || !state.reconfigs.length) return;
  const ctx = u.ctx;
  const {top, height} = u.bbox;
  ctx.save();
  ctx.strokeStyle = "#57606a";
  ctx.fillStyle = "#24292f";
  ctx.setLineDash([4, 4]);
  ctx.lineWidth = 1 * devicePixelRatio;
  ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
  for (const r of state.reconfigs) {
    const x = Math.round(u.valToPos(r.ts, "x", true));
    if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, top + height);
    ctx.stroke();
    ctx.fillText(r.label, x + 4 * devicePixelRatio, top + 12 * devicePixelRatio);
  }
  ctx.restore();
}

function chart(id, key, make) {
  const box = document.getElementById(id);
  const c = charts[id];
  const width = Math.max(300, box.clientWidth || 600);
  if (!c || c.key !== key) {
    if (c) c.plot.destroy();
    const {opts, data} = make();
    opts.width = width;
    opts.height = 220;
    opts.plugins = [{hooks: {draw: [markers]}}];
    charts[id] = {key, plot: new uPlot(opts, data, box)};
  } else {
    c.plot.setData(make().data);
  }
}

function drawCharts() {
  const t = series.t;
  for (const [kind, id, unit] of [["cores", "chart-cores", "cores"], ["gpus", "chart-gpus", "GPUs"]]) {
    const parts = partsIn(kind + ":");
    const any = parts.some((p) => series.cols[`${kind}:${p}`].some((v) => v > 0));
    if (kind === "gpus") {
      document.getElementById("chart-gpus").hidden = !any;
      document.getElementById("gpus-title").hidden = !any;
      if (!any) continue;
    }
    chart(id, parts.join(" "), () => ({
      opts: {
        series: [{}, ...parts.map((p) => ({label: short(p), stroke: colourOf(p), width: 2,
          fill: colourOf(p) + "22", paths: uPlot.paths.stepped({align: 1})}))],
        axes: [{}, {label: unit, size: 50}],
        scales: {x: {time: true}},
        legend: {live: true},
      },
      data: [t, ...parts.map((p) => series.cols[`${kind}:${p}`])],
    }));
  }
  const states = UNIT_STATES.filter((s) => (series.cols[`state:${s}`] || []).some((v) => v > 0));
  chart("chart-units", states.join(" "), () => ({
    opts: {
      series: [{}, ...states.map((s) => ({label: s, stroke: STATE_COLOURS[s], width: 2, scale: "n"})),
        {label: "units/s", stroke: "#24292f", width: 1, dash: [6, 3], scale: "rate"}],
      axes: [{}, {scale: "n", label: "units", size: 60}, {scale: "rate", side: 1, label: "units/s", grid: {show: false}, size: 60}],
      scales: {x: {time: true}},
    },
    data: [t, ...states.map((s) => series.cols[`state:${s}`]), series.cols.rate || t.map(() => 0)],
  }));
}

window.addEventListener("resize", () => {
  for (const [id, c] of Object.entries(charts)) {
    const w = Math.max(300, document.getElementById(id).clientWidth || 600);
    c.plot.setSize({width: w, height: 220});
  }
});

// -- the stream ----------------------------------------------------------------------------
function connect() {
  const status = document.getElementById("status");
  const source = new EventSource("events");
  source.addEventListener("open", () => {
    status.textContent = "live";
    status.classList.remove("down");
  });
  source.addEventListener("error", () => {
    status.textContent = "connection lost; reconnecting…";
    status.classList.add("down");
  });
  source.addEventListener("state", (e) => {
    state = JSON.parse(e.data);
    drawState();
    status.textContent = `live; updated ${clock(state.now)}`;
    status.classList.remove("down");
  });
  source.addEventListener("series", (e) => applySeries(JSON.parse(e.data)));
  source.addEventListener("problem", (e) => {
    status.textContent = `the server's last look failed: ${JSON.parse(e.data).error}`;
    status.classList.add("down");
  });
}

connect();
