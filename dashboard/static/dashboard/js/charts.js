// Small SVG line charts that update in place (one polyline per series, points rewritten).
// Series differ by dash pattern and an end label as well as colour.

const NS = "http://www.w3.org/2000/svg";
const PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"];
const DASHES = ["", "6 3", "2 3", "8 3 2 3", "1 2", "10 4"];

function el(name, attrs, parent) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

export function seriesStyle(index) {
  return { color: PALETTE[index % PALETTE.length], dash: DASHES[index % DASHES.length] };
}

export class LineChart {
  constructor(container, { windowS = 600, yMax = 1, compact = false, label = "chart" } = {}) {
    // The window grows from one minute to windowS as data accumulates, so a fresh page
    // shows lines rather than a sliver at the right edge.
    this.maxWindowS = windowS;
    this.windowS = Math.min(60, windowS);
    this.yMax = yMax;
    this.compact = compact;
    this.w = compact ? 240 : 480;
    this.h = compact ? 48 : 150;
    this.m = compact ? { l: 2, r: 2, t: 4, b: 4 } : { l: 34, r: 112, t: 8, b: 18 };
    this.series = new Map();
    this.svg = el("svg", {
      viewBox: `0 0 ${this.w} ${this.h}`, class: `linechart${compact ? " compact" : ""}`,
      role: "img", "aria-label": label,
    });
    this.axes = el("g", { class: "axes" }, this.svg);
    this.lines = el("g", { class: "lines" }, this.svg);
    this.drawAxes();
    container.replaceChildren(this.svg);
  }

  x(t, now) {
    const { l, r } = this.m;
    return l + (this.w - l - r) * (1 - (now - t) / this.windowS);
  }

  y(v) {
    const { t, b } = this.m;
    return this.h - b - (this.h - t - b) * Math.min(1, Math.max(0, v / this.yMax));
  }

  drawAxes() {
    if (this.compact) {
      el("line", { x1: this.m.l, x2: this.w - this.m.r, y1: this.y(0), y2: this.y(0), class: "grid" }, this.axes);
      return;
    }
    for (const v of [0, 0.5, 1]) {
      const y = this.y(v * this.yMax);
      el("line", { x1: this.m.l, x2: this.w - this.m.r, y1: y, y2: y, class: "grid" }, this.axes);
      const t = el("text", { x: this.m.l - 4, y: y + 3, "text-anchor": "end" }, this.axes);
      t.textContent = `${Math.round(v * this.yMax * 100)}%`;
    }
    this.leftLabel = el("text", { x: this.m.l, y: this.h - 4 }, this.axes);
    this.leftLabel.textContent = `−${Math.round(this.windowS / 60)} min`;
    const right = el("text", { x: this.w - this.m.r, y: this.h - 4, "text-anchor": "end" }, this.axes);
    right.textContent = "now";
  }

  // data: array of {key, label, index, points: [[t, v], ...]}; now: seconds.
  update(data, now) {
    const first = Math.min(...data.map((s) => (s.points.length ? s.points[0][0] : now)));
    this.windowS = Math.min(this.maxWindowS, Math.max(60, Math.ceil((now - first) / 60) * 60));
    if (this.leftLabel) this.leftLabel.textContent = `−${Math.round(this.windowS / 60)} min`;
    const keep = new Set();
    const ends = [];
    for (const s of data) {
      keep.add(s.key);
      let entry = this.series.get(s.key);
      if (!entry) {
        const style = seriesStyle(s.index);
        const line = el("polyline", {
          fill: "none", stroke: style.color, "stroke-width": this.compact ? 1.5 : 2,
          "stroke-dasharray": style.dash, "data-series": s.key,
        }, this.lines);
        const label = this.compact ? null : el("text", { class: "end", fill: style.color }, this.lines);
        entry = { line, label };
        this.series.set(s.key, entry);
      }
      const pts = s.points.filter(([t]) => t >= now - this.windowS);
      entry.line.setAttribute("points", pts.map(([t, v]) => `${this.x(t, now).toFixed(1)},${this.y(v).toFixed(1)}`).join(" "));
      if (entry.label) {
        const last = pts[pts.length - 1];
        entry.label.textContent = last ? `${s.label} ${Math.round(last[1] * 100)}%` : "";
        ends.push({ entry, y: last ? this.y(last[1]) : -100 });
      }
    }
    // Spread end labels so that they do not overprint each other.
    ends.sort((a, b) => a.y - b.y);
    let prev = -Infinity;
    for (const e of ends) {
      const y = Math.max(e.y + 3, prev + 10);
      prev = y;
      e.entry.label.setAttribute("x", this.w - this.m.r + 4);
      e.entry.label.setAttribute("y", y.toFixed(1));
    }
    for (const [key, entry] of this.series) {
      if (keep.has(key)) continue;
      entry.line.remove();
      entry.label?.remove();
      this.series.delete(key);
    }
  }
}
