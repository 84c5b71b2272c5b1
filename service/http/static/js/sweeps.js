// Sweeps: the list (#/sweeps) and a sweep's page (#/sweeps/<id>): its trials (parameters,
// state, objective, best step, pruned at), the best trial (its job page has the model), and
// scatter plots of the objective against the trial number and against each parameter (a log
// axis for log-sampled ones). Each plot's data-points attribute holds how many points it
// draws. Re-read every few seconds until the sweep ends; cancel for members.

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { all, get, post } from "./api.js";
import { axisLabel } from "./charts.js";
import { age, fmt, h, statusBadge, thead } from "./util.js";

const POLL_MS = 3000;
const DONE = new Set(["succeeded", "failed", "cancelled"]);
// One colour per trial state, so pruned and finished trials read apart in every plot.
const STATE_COLORS = { succeeded: "#16a34a", pruned: "#ea580c", running: "#2563eb",
  failed: "#dc2626", cancelled: "#6b7280" };

export function sweepsView(main, ctx) {
  const body = h("tbody");
  const note = h("p", { class: "muted", "aria-live": "polite" });
  main.replaceChildren(h("section", { class: "card", "aria-labelledby": "sweeps-title" },
    h("h1", { id: "sweeps-title" }, "Sweeps"),
    h("table", { id: "sweeps-table" },
      thead(["Sweep", "Id", "Status", "Trials", "Objective", "Best", "Age"]), body), note));
  const ctrl = new AbortController();
  async function refresh() {
    try {
      const rows = await all("/v1/sweeps", {}, { signal: ctrl.signal });
      body.replaceChildren(...(rows.length ? rows.map((s) => h("tr", { "data-sweep": s.id },
        h("td", {}, h("a", { href: `#/sweeps/${s.id}` }, s.name)),
        h("td", { class: "mono" }, s.id), h("td", {}, statusBadge(s.status)),
        h("td", { class: "num" }, `${Object.values(s.counts).reduce((a, b) => a + b, 0)}/${s.max_trials}`),
        h("td", {}, `${s.objective} (${s.direction})`),
        h("td", {}, s.best_trial ? `#${s.best_trial.number} ${fmt(s.best_trial.objective)}` : "–"),
        h("td", {}, age(s.created_at))))
        : [h("tr", {}, h("td", { colspan: 7, class: "muted" }, "no sweeps yet (shunter sweep submit)"))]));
      note.textContent = "";
    } catch (e) {
      if (e.name !== "AbortError") ctx.onError(e, note);
    }
  }
  refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
  return () => { clearInterval(timer); ctrl.abort(); };
}

// A scatter plot of the objective against one x (trial number or a parameter), coloured by
// trial state. uPlot wants one shared, sorted x array with one y per series at each x: points
// are spread over as many series (of their state's colour) as one x has points.
class Scatter {
  constructor(parent, { id, title, log = false, ticks = null, integer = false }) {
    this.log = log;
    this.integer = integer;
    this.ticks = ticks;  // categorical: index -> choice
    this.title = title;
    this.box = h("div", { class: "plot" });
    this.key = h("span", { class: "muted" });
    this.el = h("figure", { class: "chart", id, "data-points": "0" },
      h("figcaption", {}, h("strong", {}, title), " ", this.key), this.box);
    parent.append(this.el);
    this.plot = null;
    this.resize = new ResizeObserver(() => this.plot && this.plot.setSize(this.size()));
    this.resize.observe(this.box);
  }

  size() { return { width: Math.max(240, this.box.clientWidth), height: 220 }; }

  draw(points, yLabel) {  // points: [{x, y, state}]
    const usable = points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y)
      && (!this.log || p.x > 0));
    const groups = [];  // [{state, byX: Map(x -> y)}]
    for (const p of usable) {
      let g = groups.find((q) => q.state === p.state && !q.byX.has(p.x));
      if (!g) { g = { state: p.state, byX: new Map() }; groups.push(g); }
      g.byX.set(p.x, p.y);
    }
    const xs = [...new Set(usable.map((p) => p.x))].sort((a, b) => a - b);
    const data = [xs, ...groups.map((g) => xs.map((x) => (g.byX.has(x) ? g.byX.get(x) : null)))];
    this.el.dataset.points = String(usable.length);
    this.key.replaceChildren(...[...new Set(groups.map((g) => g.state))].sort()
      .map((s) => h("span", { style: `color: ${STATE_COLORS[s] || "#9333ea"}` }, `● ${s} `)));
    const ticks = this.ticks;
    const xValues = ticks
      ? (u, splits) => splits.map((v) => (Number.isInteger(v) && ticks[v] !== undefined ? ticks[v] : ""))
      : (u, splits) => splits.map(axisLabel);
    if (this.plot) this.plot.destroy();
    this.plot = new uPlot({
      ...this.size(),
      scales: { x: { time: false, distr: this.log ? 3 : 1,
        range: ticks ? [-0.5, ticks.length - 0.5] : undefined } },
      axes: [{ label: this.title.split(" vs ")[1] || "x", values: xValues,
        incrs: ticks || this.integer ? [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] : undefined },
        { label: yLabel, size: 64, values: (u, splits) => splits.map(axisLabel) }],
      legend: { show: false },
      cursor: { show: false },
      series: [{ label: "x" }, ...groups.map((g) => ({
        label: g.state, stroke: STATE_COLORS[g.state] || "#9333ea", width: 0, paths: () => null,
        points: { show: true, size: 9, fill: STATE_COLORS[g.state] || "#9333ea" } }))],
    }, data, this.box);
  }

  destroy() { this.resize.disconnect(); if (this.plot) this.plot.destroy(); }
}

function paramText(params) {
  return Object.entries(params).map(([k, v]) =>
    `${k.split(".").pop()}=${typeof v === "number" && !Number.isInteger(v) ? v.toPrecision(3) : v}`)
    .join(", ");
}

export function sweepView(main, ctx, sweepId) {
  const el = {
    title: h("h1", { id: "sweep-title" }, sweepId),
    status: h("span", { id: "sweep-status", "aria-live": "polite" }),
    facts: h("dl", { class: "kv", id: "sweep-facts" }),
    best: h("p", { id: "sweep-best" }),
    actions: h("div", { class: "actions" }),
    charts: h("div", { class: "charts", id: "sweep-charts" }),
    trials: h("tbody", { id: "trials" }),
    note: h("p", { class: "muted", "aria-live": "polite" }),
  };
  main.replaceChildren(
    h("p", {}, h("a", { href: "#/sweeps" }, "← All sweeps")),
    h("section", { class: "card", "aria-labelledby": "sweep-title" },
      h("div", { class: "row" }, el.title, el.status, el.actions), el.facts, el.best, el.note),
    h("section", { class: "card", "aria-label": "Objective" }, h("h2", {}, "Objective"), el.charts),
    h("section", { class: "card", "aria-label": "Trials" }, h("h2", {}, "Trials"),
      h("table", { id: "trials-table" },
        thead(["#", "Job", "Status", "Parameters", "Objective", "Best (step)", "Pruned at"]),
        el.trials)));
  const charts = new Map();
  const ctrl = new AbortController();
  let timer = null;

  function chart(key, opts) {
    if (!charts.has(key)) charts.set(key, new Scatter(el.charts, opts));
    return charts.get(key);
  }

  function render(s) {
    el.title.textContent = `${s.name} (${s.id})`;
    el.status.replaceChildren(statusBadge(s.status));
    el.facts.replaceChildren(
      h("dt", {}, "Objective"), h("dd", {}, `${s.objective} (${s.direction})`),
      h("dt", {}, "Trials"), h("dd", {}, `${s.trials.length} of ${s.max_trials}, ${s.max_parallel} at a time`),
      h("dt", {}, "Sampler / pruner"), h("dd", {}, `${s.sampler} / ${s.pruner}`),
      h("dt", {}, "Held"), h("dd", {}, `${fmt(s.gpu_hours_used)} GPU-h, ${fmt(s.cpu_hours_used)} CPU-h`),
      h("dt", {}, "Note"), h("dd", {}, s.message || "–"));
    const b = s.best_trial;
    el.best.replaceChildren(...(b ? ["Best: ", h("a", { href: `#/jobs/${b.job_id}` }, `trial ${b.number}`),
      ` (${paramText(b.params)}) ${s.objective} = ${fmt(b.objective)}; its model downloads from its job page.`]
      : ["No finished trial yet."]));
    el.trials.replaceChildren(...s.trials.map((t) => h("tr", { "data-trial": String(t.number),
      class: b && b.number === t.number ? "best" : "" },
      h("td", { class: "num" }, String(t.number)),
      h("td", {}, h("a", { href: `#/jobs/${t.job_id}` }, t.job_id)),
      h("td", {}, statusBadge(t.status)),
      h("td", {}, paramText(t.params)),
      h("td", { class: "num" }, fmt(t.objective)),
      h("td", { class: "num" }, t.best_value == null ? "–" : `${fmt(t.best_value)} (${t.best_step})`),
      h("td", { class: "num" }, t.pruned_at_step == null ? "–" : String(t.pruned_at_step)))));
    const withValue = s.trials.filter((t) => t.objective != null);
    const state = (t) => (["queued", "starting", "running", "cancelling", "paused"].includes(t.status) ? "running" : t.status);
    chart("trial", { id: "plot-trial", title: `${s.objective} vs trial`, integer: true })
      .draw(withValue.map((t) => ({ x: t.number, y: t.objective, state: state(t) })), s.objective);
    // Each parameter: categorical choices sit at their index, labelled with the choice.
    const space = (s.definition && s.definition.space) || {};
    Object.entries(space).forEach(([path, dist], i) => {
      const numeric = dist.type !== "categorical";
      const choices = numeric ? null : dist.choices.map(String);
      chart(path, { id: `plot-param-${i}`, title: `${s.objective} vs ${path}`, log: !!dist.log,
        ticks: choices })
        .draw(withValue.map((t) => ({
          x: numeric ? Number(t.params[path]) : choices.indexOf(String(t.params[path])),
          y: t.objective, state: state(t) })), s.objective);
    });
    el.actions.replaceChildren();
    if (!DONE.has(s.status) && ctx.me && ctx.me.role !== "viewer") {
      el.actions.append(h("button", { type: "button", id: "sweep-cancel", onclick: async () => {
        try { render(await post(`/v1/sweeps/${s.id}/cancel`)); } catch (e) { ctx.onError(e, el.note); }
      } }, "Cancel sweep"));
    }
  }

  async function refresh() {
    try {
      const s = await get(`/v1/sweeps/${encodeURIComponent(sweepId)}`, {}, ctrl.signal);
      render(s);
      el.note.textContent = "";
      if (DONE.has(s.status)) clearInterval(timer);
    } catch (e) {
      if (e.name !== "AbortError") ctx.onError(e, el.note);
    }
  }
  refresh();
  timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
  return () => { clearInterval(timer); ctrl.abort(); charts.forEach((c) => c.destroy()); };
}
