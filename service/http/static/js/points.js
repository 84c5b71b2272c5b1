// Which metric points a chart keeps: one per (name, step), from the newest attempt that ran
// the step. A resumed attempt trains again the steps past the checkpoint it resumed from, so
// those steps have a point per attempt; GET /metrics lists the newest attempt's (the API's
// default), and the live stream may still deliver an older attempt's point late (a buffer
// replayed after a cut): it never replaces the newer one. Plain data, no DOM (unit-tested).

export class NewestAttempt {
  constructor() {
    this.attempts = new Map(); // name -> Map(step -> attempt of the point kept)
  }

  // True when `p` is to be drawn (it is the first, or from the same or a newer attempt).
  keep(p) {
    if (!this.attempts.has(p.name)) this.attempts.set(p.name, new Map());
    const byStep = this.attempts.get(p.name);
    const attempt = typeof p.attempt === "number" ? p.attempt : 0;
    if ((byStep.get(p.step) ?? -1) > attempt) return false;
    byStep.set(p.step, attempt);
    return true;
  }
}
