// Webhooks (#/webhooks): the team's endpoints (a disabled one says why) and the newest
// deliveries (type, job, status, tries, last answer, next try), each with a Re-send button
// for members (same webhook-id, fresh retry schedule). Re-read every few seconds.

import { all, get, post } from "./api.js";
import { age, h, statusBadge, thead, time } from "./util.js";

const POLL_MS = 5000;
const LIMIT = 100;

function endpointRows(endpoints) {
  if (!endpoints.length) {
    return [h("tr", {}, h("td", { colspan: 5, class: "muted" },
      "no endpoints yet (shunter webhooks create URL)"))];
  }
  return endpoints.map((ep) => h("tr", { "data-endpoint": ep.id },
    h("td", { class: "mono" }, ep.id), h("td", { class: "mono" }, ep.url),
    h("td", {}, ep.events.length ? ep.events.map((e) => e.replace(/^job\./, "")).join(", ")
      : "notify: only"),
    h("td", {}, ep.enabled ? statusBadge("enabled")
      : h("span", {}, statusBadge("disabled"), " ", ep.disabled_reason || "")),
    h("td", { class: "num" }, String(ep.failures))));
}

function lastAnswer(d) {
  if (d.last_status_code !== null && d.last_status_code !== undefined) return `HTTP ${d.last_status_code}`;
  return d.last_error || "–";
}

export function webhooksView(main, ctx) {
  const endpointsBody = h("tbody");
  const deliveriesBody = h("tbody");
  const note = h("p", { class: "muted", "aria-live": "polite" });
  const canWrite = ctx.me && ctx.me.role !== "viewer";
  main.replaceChildren(
    h("section", { class: "card", "aria-labelledby": "webhooks-title" },
      h("h1", { id: "webhooks-title" }, "Webhooks"),
      h("table", { id: "webhook-endpoints" },
        thead(["Endpoint", "URL", "Events", "State", "Failures"]), endpointsBody)),
    h("section", { class: "card", "aria-labelledby": "deliveries-title" },
      h("h2", { id: "deliveries-title" }, "Deliveries (newest first)"),
      h("table", { id: "webhook-deliveries" },
        thead(["Delivery", "Type", "Job", "Status", "Tries", "Last answer",
          "Next try", "Age", ""]), deliveriesBody),
      note));
  const ctrl = new AbortController();

  function resendButton(d) {
    if (!canWrite) return "";
    return h("button", { type: "button", class: "resend", "data-resend": d.id, onclick: async (ev) => {
      ev.target.disabled = true;
      try {
        await post(`/v1/webhooks/deliveries/${encodeURIComponent(d.id)}/resend`);
        note.textContent = `${d.id} queued again`;
        refresh();
      } catch (e) {
        ctx.onError(e, note);
      } finally {
        ev.target.disabled = false;
      }
    } }, "Re-send");
  }

  function deliveryRows(rows) {
    if (!rows.length) {
      return [h("tr", {}, h("td", { colspan: 9, class: "muted" }, "no deliveries yet"))];
    }
    return rows.map((d) => h("tr", { "data-delivery": d.id },
      h("td", { class: "mono" }, d.id), h("td", {}, d.type),
      h("td", {}, h("a", { href: `#/jobs/${d.job_id}` }, d.job_id)),
      h("td", {}, statusBadge(d.status)), h("td", { class: "num" }, String(d.attempts)),
      h("td", {}, lastAnswer(d)),
      h("td", {}, d.status === "pending" ? time(d.next_attempt_at) : "–"),
      h("td", {}, age(d.created_at)), h("td", {}, resendButton(d))));
  }

  async function refresh() {
    try {
      const [endpoints, page] = await Promise.all([
        all("/v1/webhooks/endpoints", {}, { signal: ctrl.signal }),
        get("/v1/webhooks/deliveries", { limit: LIMIT }, ctrl.signal),
      ]);
      endpointsBody.replaceChildren(...endpointRows(endpoints));
      deliveriesBody.replaceChildren(...deliveryRows(page.data));
    } catch (e) {
      if (e.name !== "AbortError") ctx.onError(e, note);
    }
  }
  refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
  return () => { clearInterval(timer); ctrl.abort(); };
}
