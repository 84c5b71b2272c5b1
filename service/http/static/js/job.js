// The job page (#/jobs/<id>): header, progress, error, cancel; live loss / learning-rate /
// eval charts fed by the SSE stream (history first from /metrics); events, checkpoints, logs.
// The stream delivers points as they arrive; the job, events, checkpoints and logs are
// re-read every few seconds (and at once on a status change) until the job ends.

import { all, ApiError, get, post, stream } from "./api.js";
import { chartFor, MetricChart } from "./charts.js";
import { NewestAttempt } from "./points.js";
import { bytes, fmt, h, progressBar, statusBadge, TERMINAL, thead, time } from "./util.js";

const POLL_MS = 2500;
const LOG_TAIL_BYTES = 64 * 1024;  // the server keeps all of it; GET .../logs?offset= pages on
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]/g;

export function jobView(main, ctx, jobId) {
  const abort = new AbortController();
  const el = {
    title: h("h1", { id: "job-title" }, jobId),
    status: h("span", { id: "job-status", "aria-live": "polite" }),
    progress: h("div", { id: "job-progress" }),
    facts: h("dl", { class: "kv", id: "job-facts" }),
    error: h("div", { id: "job-error", class: "errorbox", role: "alert", hidden: true }),
    actions: h("div", { class: "actions" }),
    charts: h("div", { class: "charts" }),
    latest: h("dl", { class: "kv", id: "latest-metrics" }),
    events: h("ol", { id: "events", class: "timeline" }),
    ckpts: h("tbody", { id: "checkpoints" }),
    logs: h("pre", { id: "logs", tabindex: "0", "aria-label": "log tail" }),
    live: h("span", { class: "muted", id: "stream-state" }),
  };
  main.replaceChildren(
    h("p", {}, h("a", { href: "#/" }, "← All jobs")),
    h("section", { class: "card", "aria-labelledby": "job-title" },
      h("div", { class: "row" }, el.title, el.status, el.actions),
      el.progress, el.facts, el.error),
    h("section", { class: "card", "aria-label": "Metrics" },
      h("div", { class: "row" }, h("h2", {}, "Metrics"), el.live), el.charts,
      h("h3", {}, "Latest"), el.latest),
    h("div", { class: "grid2" },
      h("section", { class: "card", "aria-label": "Events" }, h("h2", {}, "Events"), el.events),
      h("section", { class: "card", "aria-label": "Checkpoints" }, h("h2", {}, "Checkpoints"),
        h("table", {}, thead(["Step", "Verified", "Size", "Created", "URI"]), el.ckpts))),
    h("section", { class: "card", "aria-label": "Logs" }, h("h2", {}, "Logs (tail)"), el.logs));

  const charts = {
    loss: new MetricChart(el.charts, { id: "chart-loss", title: "Loss", wide: true, height: 280 }),
    lr: new MetricChart(el.charts, { id: "chart-lr", title: "Learning rate" }),
    eval: new MetricChart(el.charts, { id: "chart-eval", title: "Eval metrics" }),
  };
  const latest = new Map();
  const newest = new NewestAttempt(); // a step re-run after a resume: drawn once, newest attempt
  let job = null;
  let timer = null;

  function addPoint(p) {
    if (!p || typeof p.step !== "number" || typeof p.name !== "string") return;
    if (!newest.keep(p)) return;
    const which = chartFor(p.name);
    if (which) charts[which].add(p.name, p.step, p.value);
    const prev = latest.get(p.name);
    if (!prev || prev.step <= p.step) latest.set(p.name, { step: p.step, value: p.value });
    renderLatest();
  }

  function renderLatest() {
    el.latest.replaceChildren(...[...latest.keys()].sort().flatMap((n) => [
      h("dt", {}, n), h("dd", {}, `${fmt(latest.get(n).value)} @ ${latest.get(n).step}`)]));
  }

  function renderJob(j) {
    job = j;
    el.title.textContent = j.name || j.id;
    el.status.replaceChildren(statusBadge(j.status));
    el.progress.replaceChildren(progressBar(j.progress));
    const facts = [
      ["ID", j.id], ["Team", j.team], ["Attempt", j.attempt], ["Created", time(j.created_at)],
      ["Started", time(j.started_at)], ["Finished", time(j.finished_at)],
    ];
    if (j.status === "queued") facts.push(["Queue position", j.queue_position],
      ["Waiting for", j.pending_reason]);
    if (j.final_model_uri) facts.push(["Final model", j.final_model_uri]);
    el.facts.replaceChildren(...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, fmt(v))]));
    el.error.hidden = !j.error;
    if (j.error) el.error.replaceChildren(h("strong", {}, j.error.type), ": ", j.error.message);
    const canCancel = ["member", "admin"].includes(ctx.me && ctx.me.role) && !TERMINAL.has(j.status)
      && j.status !== "cancelling";
    el.actions.replaceChildren(canCancel
      ? h("button", { type: "button", id: "cancel", class: "danger", onclick: cancel }, "Cancel job")
      : "");
  }

  async function cancel(ev) {
    ev.target.disabled = true;
    if (!window.confirm(`Cancel job ${job.name || job.id}?`)) { ev.target.disabled = false; return; }
    try {
      renderJob(await post(`/v1/jobs/${jobId}/cancel`));
      refresh();
    } catch (e) {
      ev.target.disabled = false;
      ctx.onError(e, el.live);
    }
  }

  async function refresh() {
    try {
      const [j, events, ckpts, logs] = await Promise.all([
        get(`/v1/jobs/${jobId}`, {}, abort.signal),
        all(`/v1/jobs/${jobId}/events`, {}, { signal: abort.signal }),
        all(`/v1/jobs/${jobId}/checkpoints`, {}, { signal: abort.signal }),
        get(`/v1/jobs/${jobId}/logs`, { tail: LOG_TAIL_BYTES }, abort.signal).catch(() => ""),
      ]);
      renderJob(j);
      el.events.replaceChildren(...events.map(eventItem));
      el.ckpts.replaceChildren(...ckpts.map(ckptRow));
      if (!ckpts.length) el.ckpts.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, "none yet")));
      const text = typeof logs === "string" ? logs : (logs && (logs.text || logs.logs)) || "";
      const atBottom = el.logs.scrollHeight - el.logs.scrollTop - el.logs.clientHeight < 20;
      // Ray colours its log prefixes with ANSI escapes; a <pre> would show them as boxes.
      el.logs.textContent = text.replace(ANSI, "") || "(no log output yet)";
      if (logs && logs.attempt) el.logs.title = `attempt ${logs.attempt}: ${bytes(logs.size)} stored`;
      if (atBottom) el.logs.scrollTop = el.logs.scrollHeight;
      if (TERMINAL.has(j.status)) clearInterval(timer);
    } catch (e) {
      if (e.name === "AbortError") return;
      if (e instanceof ApiError && e.status === 404) {
        main.replaceChildren(h("section", { class: "card" }, h("h1", {}, "Job not found"),
          h("p", {}, `No job ${jobId} is visible to your team.`), h("a", { href: "#/" }, "All jobs")));
        stop();
        return;
      }
      ctx.onError(e, el.live);
    }
  }

  async function follow() {
    try {
      for (const p of await all(`/v1/jobs/${jobId}/metrics`, { limit: 1000 }, { signal: abort.signal })) {
        addPoint(p);
      }
    } catch (e) {
      if (e.name === "AbortError") return;
      ctx.onError(e, el.live);
    }
    // Reconnect while the job is live: a proxy or server restart may cut a long stream.
    while (!abort.signal.aborted && !(job && TERMINAL.has(job.status))) {
      el.live.textContent = "● live";
      let ended = false;
      try {
        await stream(`/v1/jobs/${jobId}/metrics/stream`, (m) => {
          onStreamEvent(m);
          if (m.event === "end") ended = true;
        }, abort.signal);
      } catch (e) {
        if (e.name === "AbortError") return;
        el.live.textContent = `stream interrupted (${e.message}); retrying`;
        await new Promise((r) => setTimeout(r, 2000));
      }
      if (ended) break;
    }
    el.live.textContent = job && TERMINAL.has(job.status) ? `job ${job.status}` : "";
  }

  function onStreamEvent({ event, data }) {
    if (data && Array.isArray(data.points)) data.points.forEach(addPoint);
    else if (data && typeof data.step === "number" && typeof data.name === "string") addPoint(data);
    if (event === "status" || event === "end" || (data && data.status)) refresh();
  }

  function stop() {
    abort.abort();
    clearInterval(timer);
    Object.values(charts).forEach((c) => c.destroy());
  }

  refresh().then(follow);
  // No polling while the tab is hidden; one refresh as soon as it is shown again.
  const visible = () => document.visibilityState === "visible";
  timer = setInterval(() => { if (visible()) refresh(); }, POLL_MS);
  const onVisible = () => { if (visible() && !(job && TERMINAL.has(job.status))) refresh(); };
  document.addEventListener("visibilitychange", onVisible, { signal: abort.signal });
  return stop;
}

function eventItem(e) {
  const what = e.to_status ? `${e.from_status ? `${e.from_status} → ` : ""}${e.to_status}` : e.type;
  return h("li", {}, h("time", { datetime: e.created_at || e.time || "" }, time(e.created_at || e.time)),
    " ", h("strong", {}, what || "event"), e.message ? ` — ${e.message}` : "");
}

function ckptRow(c) {
  return h("tr", {}, h("td", { class: "num" }, c.step), h("td", {}, c.verified ? "yes" : "no"),
    h("td", { class: "num" }, bytes(c.bytes)), h("td", {}, time(c.created_at)),
    h("td", { class: "mono" }, c.uri));
}
