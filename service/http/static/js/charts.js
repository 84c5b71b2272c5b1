// Line charts of metric series over steps, drawn with the vendored uPlot.
// A chart owns a set of named series (Map step -> value); `add` merges points and redraws
// at most once per animation frame. The container's data-points attribute holds how many
// points are drawn (tests and screen readers can read it without inspecting the canvas).

import uPlot from "../vendor/uplot/uPlot.esm.js";
import { h } from "./util.js";

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

export class MetricChart {
  constructor(parent, { id, title, empty = "no points yet", wide = false, height = 220 }) {
    this.height = height;
    this.series = new Map(); // name -> Map(step -> value)
    this.title = title;
    this.count = h("span", { class: "muted" }, empty);
    this.plotBox = h("div", { class: "plot" });
    this.el = h("figure", { class: wide ? "chart wide" : "chart", id, "data-points": "0" },
      h("figcaption", {}, h("strong", {}, title), " ", this.count), this.plotBox);
    parent.append(this.el);
    this.plot = null;
    this.pending = false;
    this.resize = new ResizeObserver(() => this.plot && this.plot.setSize(this.size()));
    this.resize.observe(this.plotBox);
  }

  size() {
    return { width: Math.max(240, this.plotBox.clientWidth), height: this.height };
  }

  add(name, step, value) {
    if (value === null || value === undefined || !Number.isFinite(value)) return;
    if (!this.series.has(name)) this.series.set(name, new Map());
    this.series.get(name).set(step, value);
    this.schedule();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  draw() {
    const names = [...this.series.keys()].sort();
    const steps = [...new Set(names.flatMap((n) => [...this.series.get(n).keys()]))]
      .sort((a, b) => a - b);
    const data = [steps, ...names.map((n) => steps.map((s) => this.series.get(n).get(s) ?? null))];
    const total = names.reduce((acc, n) => acc + this.series.get(n).size, 0);
    this.el.dataset.points = String(total);
    const last = names.map((n) => {
      const m = this.series.get(n);
      return `${n} ${m.get(Math.max(...m.keys())).toPrecision(4)}`;
    });
    this.count.textContent = `${total} points · latest ${last.join(", ")}`;
    const key = names.join("|");
    if (!this.plot || this.key !== key) {
      if (this.plot) this.plot.destroy();
      this.key = key;
      this.plot = new uPlot(this.options(names), data, this.plotBox);
    } else {
      this.plot.setData(data);
    }
  }

  options(names) {
    return {
      ...this.size(),
      scales: { x: { time: false } },
      axes: [{ label: "step" }, { size: 64, values: (u, splits) => splits.map(axisLabel) }],
      legend: { show: names.length > 1 },
      cursor: { drag: { x: true, y: false } },
      series: [
        { label: "step" },
        ...names.map((n, i) => ({
          label: n,
          stroke: COLORS[i % COLORS.length],
          width: 2,
          spanGaps: true,
          points: { show: this.pointsShown() },
        })),
      ],
    };
  }

  pointsShown() {
    // Dots help while a run has few points; a long curve reads better as a line.
    const total = [...this.series.values()].reduce((a, m) => a + m.size, 0);
    return total <= 60;
  }

  destroy() {
    this.resize.disconnect();
    if (this.plot) this.plot.destroy();
  }
}

// Tick labels that stay distinct for small values (learning rates): 3e-5, not 0.
export function axisLabel(v) {
  if (v === null || v === undefined) return "";
  if (v === 0) return "0";
  const a = Math.abs(v);
  return a < 1e-2 || a >= 1e5 ? v.toExponential(1) : String(+v.toPrecision(4));
}

// Which chart a metric name belongs to: "loss", "lr", "eval" or null (not charted).
// (train_loss is the run's mean, reported once at the end: not a point of the curve.)
export function chartFor(name) {
  if (name === "loss" || name === "train/loss") return "loss";
  if (/^(lr|learning_rate)$|\/lr$/.test(name)) return "lr";
  if (/^eval[_/]/.test(name)) return "eval";
  return null;
}
