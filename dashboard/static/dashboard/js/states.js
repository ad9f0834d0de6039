// Region and endpoint states: each has a shape, a label and a colour (Okabe–Ito palette),
// so that no state is told by colour alone.

export const STATES = {
  healthy: { label: "healthy", shape: "circle", color: "#009E73" },
  degraded: { label: "degraded", shape: "triangle", color: "#E69F00" },
  down: { label: "down", shape: "cross", color: "#D55E00" },
  recovering: { label: "recovering", shape: "diamond", color: "#0072B2" },
  drained: { label: "drained", shape: "square", color: "#666666" },
  unknown: { label: "unknown", shape: "ring", color: "#888888" },
  // A drill under way: whatever the drill does to the region is practice, not an outage.
  drill: { label: "drill", shape: "hexagon", color: "#CC79A7" },
};

export const STATE_ORDER = ["healthy", "degraded", "recovering", "down", "drained", "drill", "unknown"];

export function stateOf(name) {
  return STATES[name] ? name : "unknown";
}

// SVG path of a shape centred on 0,0 with "radius" r (similar visual area for every shape).
export function shapePath(shape, r) {
  const f = (n) => n.toFixed(2);
  switch (shape) {
    case "triangle": {
      const h = r * 1.25;
      return `M0,${f(-h)}L${f(h * 0.95)},${f(h * 0.7)}L${f(-h * 0.95)},${f(h * 0.7)}Z`;
    }
    case "cross": {
      const a = r * 0.95, w = r * 0.38;
      return `M${f(-a)},${f(-a + w)}L${f(-a + w)},${f(-a)}L0,${f(-w)}L${f(a - w)},${f(-a)}` +
        `L${f(a)},${f(-a + w)}L${f(w)},0L${f(a)},${f(a - w)}L${f(a - w)},${f(a)}L0,${f(w)}` +
        `L${f(-a + w)},${f(a)}L${f(-a)},${f(a - w)}L${f(-w)},0Z`;
    }
    case "diamond": {
      const d = r * 1.3;
      return `M0,${f(-d)}L${f(d)},0L0,${f(d)}L${f(-d)},0Z`;
    }
    case "square": {
      const s = r * 0.9;
      return `M${f(-s)},${f(-s)}H${f(s)}V${f(s)}H${f(-s)}Z`;
    }
    case "hexagon": {
      const h = r * 1.1, w = h * 0.866;
      return `M0,${f(-h)}L${f(w)},${f(-h / 2)}L${f(w)},${f(h / 2)}L0,${f(h)}` +
        `L${f(-w)},${f(h / 2)}L${f(-w)},${f(-h / 2)}Z`;
    }
    default: // circle and ring
      return `M${f(-r)},0A${f(r)},${f(r)} 0 1,0 ${f(r)},0A${f(r)},${f(r)} 0 1,0 ${f(-r)},0Z`;
  }
}

// Inline SVG icon of a state, for tables and cards (decorative: the label says it).
export function stateIcon(state, size = 14) {
  const s = STATES[stateOf(state)];
  const r = size / 2 - 2;
  const hollow = s.shape === "ring" || s.shape === "square";
  const fill = hollow ? "none" : s.color;
  const stroke = s.color;
  return `<svg class="icon" width="${size}" height="${size}" viewBox="${-size / 2} ${-size / 2} ` +
    `${size} ${size}" aria-hidden="true" focusable="false"><path d="${shapePath(s.shape, r)}" ` +
    `fill="${fill}" stroke="${stroke}" stroke-width="${hollow ? 2 : 1}"/></svg>`;
}

export function badge(state, text) {
  const name = stateOf(state);
  return `<span class="badge state-${name}" data-state="${name}">${stateIcon(name)}` +
    `<span>${text ?? STATES[name].label}</span></span>`;
}

// The states the loop shows an endpoint in (live.state), with their labels.
const ENDPOINT_LABELS = { healthy: "healthy", degraded: "degraded", down: "unhealthy" };

// An endpoint as the table shows it: drained by its admin, else the state the loop shows it in
// (healthy, degraded or down, held by the band and hold-down regions have), else its verdict.
export function endpointState(row, live) {
  if (row && row.admin_state !== "active") return { state: "drained", label: row.admin_state };
  if (!live || live.evidence === false || live.healthy === undefined) {
    return { state: "unknown", label: "no data" };
  }
  if (ENDPOINT_LABELS[live.state]) return { state: live.state, label: ENDPOINT_LABELS[live.state] };
  return live.healthy ? { state: "healthy", label: "healthy" } : { state: "down", label: "unhealthy" };
}
