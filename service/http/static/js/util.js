// Small DOM and formatting helpers shared by the views.

export const TERMINAL = new Set(["succeeded", "failed", "cancelled", "pruned"]);

// h("td", {class: "x"}, "text", child) — build an element; strings become text nodes
// (never innerHTML, so API data can't inject markup).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// A table's header row: a column header (scope "col") per name.
export function thead(columns) {
  return h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c))));
}

export function statusBadge(status) {
  return h("span", { class: `badge s-${status}` }, status);
}

export function age(iso) {
  if (!iso) return "–";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s >= 86400) return `${Math.floor(s / 86400)}d`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h`;
  if (s >= 60) return `${Math.floor(s / 60)}m`;
  return `${s}s`;
}

export function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toPrecision(4);
  if (typeof v === "object" && "value" in v) return fmt(v.value);
  return String(v);
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function progressBar(progress) {
  const p = progress || {};
  const total = p.total_steps || 0;
  const step = p.step || 0;
  const pct = total ? Math.min(100, (100 * step) / total) : 0;
  const label = total ? `${step}/${total}` : step ? `${step}` : "–";
  return h("div", { class: "progress" },
    h("progress", { max: total || 1, value: total ? step : 0, "aria-label": `progress ${label}` }),
    h("span", {}, label));
}

export function time(iso) {
  return iso ? new Date(iso).toLocaleString() : "–";
}
