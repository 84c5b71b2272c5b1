// The cluster view (#/cluster): who holds what (per team: jobs running and queued, GPUs and
// CPUs held, weight, quota, max priority, GPU-hours over the last day, what fair share owes
// it, its budget: used and left this period) and the queue with each job's expected start. Another team's queued job shows as
// capacity only (the API's privacy rule). Auto-refreshes; returns a function that stops its
// timer.

import { all, get } from "./api.js";
import { age, fmt, h, thead } from "./util.js";

const REFRESH_MS = 5000;
const RUNNING = ["starting", "running", "cancelling"];

function eta(iso) {
  if (!iso) return "unknown";
  const secs = (new Date(iso) - Date.now()) / 1000;
  if (secs < 60) return "now";
  return secs < 5400 ? `in ${Math.round(secs / 60)} min` : `in ${(secs / 3600).toFixed(1)} h`;
}

// A budget as "used / limit (left) per period"; past it, flagged with its mode.
export function budgetText(b) {
  if (!b) return "none";
  const parts = [];
  if (b.gpu_hours != null) {
    parts.push(`GPU-h ${b.gpu_hours_used.toFixed(2)} / ${b.gpu_hours} (left ${b.gpu_hours_left.toFixed(2)})`);
  }
  if (b.cpu_hours != null) {
    parts.push(`CPU-h ${b.cpu_hours_used.toFixed(2)} / ${b.cpu_hours} (left ${b.cpu_hours_left.toFixed(2)})`);
  }
  const over = b.exceeded ? ` (spent: ${b.mode === "soft" ? "queued at low" : "refused"})` : "";
  return `${parts.join(", ")} per ${b.period}${over}`;
}

function quotaText(q) {
  if (!q) return "none";
  const parts = [];
  if (q.max_gpus != null) parts.push(`${q.max_gpus} GPUs`);
  if (q.max_cpus != null) parts.push(`${q.max_cpus} CPUs`);
  if (q.max_running_jobs != null) parts.push(`${q.max_running_jobs} jobs`);
  return parts.join(", ") || "none";
}

async function teamRows(signal) {
  const [teams, queue, ...byStatus] = await Promise.all([
    all("/v1/teams", {}, { signal }),
    all("/v1/queue", {}, { signal }),
    ...RUNNING.map((status) => all("/v1/jobs", { status, include: "spec" }, { signal })),
  ]);
  const running = byStatus.flat();
  const since = new Date(Date.now() - 86400e3).toISOString();
  const usage = await Promise.all(teams.map((t) =>
    get(`/v1/teams/${encodeURIComponent(t.name)}/usage`, { since }, signal).catch(() => null)));
  return teams.map((t, i) => {
    const mine = running.filter((j) => j.team === t.name);
    const held = (key) => mine.reduce((sum, j) => {
      const r = (j.spec && j.spec.resources) || {};
      return sum + (r.num_workers || 0) * (r[key] || 0);
    }, 0);
    const gpus = held("gpus_per_worker");
    const cpus = held("cpus_per_worker");
    const queued = queue.filter((q) => q.team === t.name).length;
    const gpuHours = usage[i] ? (usage[i].gpu_seconds / 3600).toFixed(1) : "-";
    // Fair share's account, in cluster-hours: > 0 the team is owed, < 0 it owes.
    const owed = usage[i] ? (usage[i].owed_share_seconds / 3600).toFixed(2) : "-";
    return h("tr", {},
      h("td", {}, t.name), h("td", {}, fmt(mine.length)), h("td", {}, fmt(queued)),
      h("td", {}, fmt(gpus)), h("td", {}, fmt(cpus)), h("td", {}, fmt(t.weight)),
      h("td", {}, quotaText(t.quota)), h("td", {}, t.max_priority || "-"), h("td", {}, gpuHours),
      h("td", { class: usage[i] && usage[i].budget && usage[i].budget.exceeded ? "bad" : "" },
        budgetText(usage[i] && usage[i].budget)),
      h("td", {}, owed));
  });
}

async function queueRows(signal) {
  const queue = await all("/v1/queue", {}, { signal });
  return queue.map((q) => h("tr", {},
    h("td", {}, fmt(q.position)),
    h("td", {}, q.anonymous ? "(another team)" : (q.name || q.id)),
    h("td", {}, q.team || "-"), h("td", {}, q.priority),
    h("td", {}, `${q.num_workers} × (${q.cpus_per_worker} CPU, ${q.gpus_per_worker} GPU)`),
    h("td", {}, q.created_at ? age(q.created_at) : "-"),
    h("td", { title: q.estimated_start_at || "" }, eta(q.estimated_start_at)),
    h("td", {}, q.pending_reason || "-")));
}

export function clusterView(main, ctx) {
  const teamsBody = h("tbody");
  const queueBody = h("tbody");
  const note = h("p", { class: "muted", "aria-live": "polite" });
  main.replaceChildren(
    h("section", { class: "card", "aria-labelledby": "teams-title" },
      h("h1", { id: "teams-title" }, "Who holds what"),
      h("table", { id: "teams-table" },
        thead(["Team", "Running", "Queued", "GPUs", "CPUs", "Weight",
          "Quota", "Max priority", "GPU-h (24 h)",
          "Budget (used / limit)", "Owed (cluster-h)"]),
        teamsBody),
      note),
    h("section", { class: "card", "aria-labelledby": "cqueue-title" },
      h("h2", { id: "cqueue-title" }, "Queue"),
      h("table", { id: "cluster-queue-table" },
        thead(["#", "Job", "Team", "Priority", "Needs", "Waiting",
          "Expected start", "Reason"]),
        queueBody)));
  const ctrl = new AbortController();
  async function refresh() {
    try {
      const [teams, queue] = await Promise.all([teamRows(ctrl.signal), queueRows(ctrl.signal)]);
      teamsBody.replaceChildren(...teams);
      queueBody.replaceChildren(...(queue.length ? queue
        : [h("tr", {}, h("td", { colspan: 8, class: "muted" }, "Nothing is queued."))]));
      note.textContent = "";
    } catch (e) {
      if (!ctrl.signal.aborted) ctx.onError(e, note);
    }
  }
  refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  return () => { clearInterval(timer); ctrl.abort(); };
}
