// The jobs view (#/): the team's jobs with a status filter, and the queue; auto-refreshes.

import { all, get } from "./api.js";
import { age, fmt, h, progressBar, statusBadge, thead } from "./util.js";

const STATUSES = ["", "queued", "starting", "running", "cancelling", "succeeded", "failed",
  "cancelled", "paused", "pruned"];
const REFRESH_MS = 3000;

export function jobsView(main, ctx) {
  const filter = h("select", { id: "status-filter", onchange: () => refresh() },
    STATUSES.map((s) => h("option", { value: s }, s || "all")));
  filter.value = sessionStorage.getItem("shunter.filter") || "";
  const jobsBody = h("tbody");
  const queueBody = h("tbody");
  const note = h("p", { class: "muted", "aria-live": "polite" });
  main.replaceChildren(
    h("section", { class: "card", "aria-labelledby": "jobs-title" },
      h("div", { class: "row" },
        h("h1", { id: "jobs-title" }, "Jobs"),
        h("label", { class: "filter" }, "Status ", filter)),
      h("table", { id: "jobs-table" },
        thead(["Name", "ID", "Status", "Team", "Progress", "Loss", "Age"]),
        jobsBody),
      note),
    h("section", { class: "card", "aria-labelledby": "queue-title" },
      h("h2", { id: "queue-title" }, "Queue"),
      h("table", { id: "queue-table" },
        thead(["#", "Name", "Team", "Priority", "Waiting", "Reason"]),
        queueBody)));

  async function refresh() {
    sessionStorage.setItem("shunter.filter", filter.value);
    try {
      const [jobs, queue] = await Promise.all([
        all("/v1/jobs", { status: filter.value, limit: 100 }, { max: 200 }),
        all("/v1/queue"),
      ]);
      jobsBody.replaceChildren(...jobs.map(jobRow));
      if (!jobs.length) jobsBody.append(emptyRow(7, "No jobs yet. Submit one with `shunter submit`."));
      queueBody.replaceChildren(...queue.map(queueRow));
      if (!queue.length) queueBody.append(emptyRow(6, "Nothing is waiting."));
      note.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      ctx.onError(e, note);
    }
  }

  refresh();
  // No polling while the tab is hidden; one refresh as soon as it is visible again.
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  const onVisible = () => { if (!document.hidden) refresh(); };
  document.addEventListener("visibilitychange", onVisible);
  return () => {
    clearInterval(timer);
    document.removeEventListener("visibilitychange", onVisible);
  };
}

function jobRow(j) {
  const loss = j.latest_metrics ? j.latest_metrics.loss : undefined;
  return h("tr", { "data-job": j.id },
    h("td", {}, h("a", { href: `#/jobs/${j.id}` }, j.name || j.id)),
    h("td", { class: "mono" }, j.id),
    h("td", {}, statusBadge(j.status)),
    h("td", {}, j.team || "–"),
    h("td", {}, progressBar(j.progress)),
    h("td", { class: "num" }, fmt(loss)),
    h("td", { title: j.created_at || "" }, age(j.created_at)));
}

function queueRow(q) {
  if (q.anonymous) {  // another team's job: capacity only (no id, name or reason)
    return h("tr", { class: "muted" },
      h("td", { class: "num" }, fmt(q.position)),
      h("td", {}, "another team's job"), h("td", {}, "–"), h("td", {}, q.priority || "–"),
      h("td", {}, "–"),
      h("td", {}, `${q.num_workers} × (${fmt(q.cpus_per_worker)} CPU, ${fmt(q.gpus_per_worker)} GPU)`));
  }
  return h("tr", {},
    h("td", { class: "num" }, fmt(q.position ?? q.queue_position)),
    h("td", {}, h("a", { href: `#/jobs/${q.id}` }, q.name || q.id)),
    h("td", {}, q.team || "–"),
    h("td", {}, q.priority || (q.spec && q.spec.priority) || "–"),
    h("td", {}, age(q.created_at)),
    h("td", {}, q.reason || q.pending_reason || "–"));
}

function emptyRow(span, text) {
  return h("tr", {}, h("td", { colspan: span, class: "muted" }, text));
}

// The cluster panel: free/total CPUs and GPUs, per node.
export async function renderCluster(box) {
  const c = await get("/v1/cluster");
  const nodes = c.nodes || [];
  box.replaceChildren(
    h("dl", { class: "kv" },
      h("dt", {}, "CPUs free"), h("dd", { id: "cluster-cpus" }, `${fmt(c.free_cpus)} / ${fmt(c.total_cpus)}`),
      h("dt", {}, "GPUs free"), h("dd", { id: "cluster-gpus" }, `${fmt(c.free_gpus)} / ${fmt(c.total_gpus)}`),
      h("dt", {}, "Nodes"), h("dd", {}, String(nodes.filter((n) => n.alive !== false).length))),
    h("ul", { class: "nodes" }, nodes.map((n) => h("li", {},
      h("span", { class: "mono" }, n.address || n.node_id), n.alive === false ? " (down)" : "",
      h("br"), h("small", {}, `cpu ${fmt(n.free_cpus)}/${fmt(n.total_cpus)} · gpu ${fmt(n.free_gpus)}/${fmt(n.total_gpus)}`)))));
}
