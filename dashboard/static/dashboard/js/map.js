// The world map: Natural Earth countries, residency zones hatched, flows from client zones
// to regions by current weight, regions as markers sized by capacity and drawn by state.

import { esc, duration, pct } from "./format.js";
import { isCountryZone, projection, zoneLabel } from "./geo.js";
import { badge, shapePath, STATES, STATE_ORDER, stateOf } from "./states.js";
import {
  nominal, regionFigures, regionNames, regionStatus, serverNow, state, trafficShare,
} from "./store.js";

const NS = "http://www.w3.org/2000/svg";
const PATTERNS = [
  { color: "#0072B2", lines: "M0,8 L8,0" },
  { color: "#CC79A7", lines: "M0,0 L8,8" },
  { color: "#56B4E9", lines: "M4,0 V8" },
];

function el(name, attrs = {}, parent = null) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

export class FleetMap {
  constructor(container, tip, legend, world, onSelect) {
    this.container = container;
    this.tip = tip;
    this.legend = legend;
    this.world = world;
    this.project = projection(world);
    this.onSelect = onSelect;
    this.model = "";
    this.continents = false;
    this.selected = null;
    this.markers = new Map();
    this.flows = new Map();
    this.shapes = new Map(world.countries.map((c) => [c.id, c]));
    this.build();
    new ResizeObserver(() => this.resize()).observe(container);
  }

  build() {
    const svg = el("svg", {
      viewBox: `0 0 ${this.world.width} ${this.world.height}`, class: "world",
      role: "group", "aria-label": "World map of regions and client flows",
    });
    const defs = el("defs", {}, svg);
    PATTERNS.forEach((p, i) => {
      const pat = el("pattern", {
        id: `res-${i}`, width: 8, height: 8, patternUnits: "userSpaceOnUse",
      }, defs);
      el("path", { d: p.lines, stroke: p.color, "stroke-width": 2 }, pat);
    });
    el("path", { d: this.world.sphere, class: "sphere" }, svg);
    el("path", { d: this.world.graticule, class: "graticule" }, svg);
    const land = el("g", { class: "countries", "aria-hidden": "true" }, svg);
    for (const c of this.world.countries) {
      const path = el("path", { d: c.d, "data-cc": c.id }, land);
      el("title", {}, path).textContent = c.name;
    }
    this.residencyLayer = el("g", { class: "residency" }, svg);
    this.flowLayer = el("g", { class: "flows", "aria-hidden": "true" }, svg);
    this.zoneLayer = el("g", { class: "zones", "aria-hidden": "true" }, svg);
    this.markerLayer = el("g", { class: "markers" }, svg);
    this.svg = svg;
    this.container.replaceChildren(svg);
  }

  resize() {
    const width = this.container.clientWidth || this.world.width;
    // Keep markers legible on narrow screens: grow them as the map shrinks.
    this.inv = Math.min(2.2, Math.max(1, 600 / width));
    for (const m of this.markers.values()) this.place(m);
  }

  place(m) {
    m.g.setAttribute("transform", `translate(${m.x.toFixed(1)},${m.y.toFixed(1)}) scale(${this.inv || 1})`);
  }

  update(parts) {
    if (parts.has("all") || parts.has("config")) {
      this.drawResidency();
      this.drawLegend();
    }
    this.drawMarkers();
    if (parts.has("all") || parts.has("config") || parts.has("table") || parts.has("view")) {
      this.drawFlows();
    }
  }

  setModel(model) {
    this.model = model;
    this.drawFlows();
  }

  setContinents(on) {
    this.continents = on;
    this.drawFlows();
  }

  select(name) {
    this.selected = name;
    for (const [key, m] of this.markers) m.g.classList.toggle("selected", key === name);
  }

  drawResidency() {
    this.residencyLayer.replaceChildren();
    state.residency.forEach((rule, i) => {
      const fill = `url(#res-${i % PATTERNS.length})`;
      for (const cc of rule.covered_countries) {
        const shape = this.shapes.get(cc);
        if (!shape) continue;
        const path = el("path", { d: shape.d, fill, "data-rule": rule.name }, this.residencyLayer);
        el("title", {}, path).textContent =
          `${shape.name}: residency ${rule.name} (${rule.mode}) → ${rule.regions.join(", ")}`;
      }
    });
  }

  drawLegend() {
    const states = STATE_ORDER.map((s) => badge(s)).join("");
    const rules = state.residency.map((rule, i) => {
      const p = PATTERNS[i % PATTERNS.length];
      return `<span class="legend-item"><svg width="16" height="12" aria-hidden="true">` +
        `<rect width="16" height="12" fill="#fff" stroke="#999"/><path d="M0,12 L12,0 M4,12 L16,0" ` +
        `stroke="${p.color}" stroke-width="2"/></svg>residency ${esc(rule.name)} (${esc(rule.mode)}: ` +
        `${esc(rule.regions.join(", "))})</span>`;
    }).join("");
    this.legend.innerHTML = `<span class="legend-states">${states}</span>` +
      `<span class="legend-item"><svg width="28" height="12" aria-hidden="true"><path d="M0,6 H28" ` +
      `class="flow" stroke-width="5"/></svg>client flow, width = share of the zone's traffic</span>` +
      `<span class="legend-item">marker size = configured capacity</span>${rules}`;
  }

  drawMarkers() {
    const names = regionNames();
    const caps = names.map((n) => nominal(n));
    const maxCap = Math.max(1, ...caps);
    for (const [name, m] of this.markers) {
      if (!state.regions.has(name)) {
        m.g.remove();
        this.markers.delete(name);
      }
    }
    const boxes = [];
    names.forEach((name, i) => {
      const row = state.regions.get(name);
      const status = regionStatus(name);
      const shown = stateOf(status.shown);
      const s = STATES[shown];
      let m = this.markers.get(name);
      if (!m) m = this.createMarker(name);
      [m.x, m.y] = this.project(row.lon, row.lat);
      const r = 5 + 11 * Math.sqrt(caps[i] / maxCap);
      m.shape.setAttribute("d", shapePath(s.shape, r));
      m.halo.setAttribute("r", (r + 6).toFixed(1));
      m.g.setAttribute("class", `marker state-${shown}${name === this.selected ? " selected" : ""}`);
      m.g.dataset.state = shown;
      const share = trafficShare(name, this.model);
      const label = status.drill ? `drill (${status.state})` : s.label;
      m.g.setAttribute("aria-label", `${name}: ${label}, ${pct(share)} of traffic`);
      m.name.textContent = name;
      m.state.textContent = label;
      // Labels go above the marker unless that hides a label already placed.
      const box = { x0: m.x - 34, x1: m.x + 34, y0: m.y - r - 26, y1: m.y - r };
      const above = !boxes.some((b) => b.x0 < box.x1 && box.x0 < b.x1 && b.y0 < box.y1 && box.y0 < b.y1);
      const dy = above ? -r - 15 : r + 12;
      if (!above) Object.assign(box, { y0: m.y + r, y1: m.y + r + 26 });
      boxes.push(box);
      m.label.setAttribute("transform", `translate(0,${dy})`);
      this.place(m);
    });
  }

  createMarker(name) {
    const g = el("g", { tabindex: 0, role: "button", "data-region": name }, this.markerLayer);
    const m = { g, x: 0, y: 0 };
    m.halo = el("circle", { class: "halo", r: 12 }, g);
    m.shape = el("path", { class: "shape" }, g);
    m.label = el("g", { class: "label" }, g);
    m.name = el("text", { class: "name", "text-anchor": "middle" }, m.label);
    m.state = el("text", { class: "state", "text-anchor": "middle", dy: 10 }, m.label);
    g.addEventListener("click", () => this.onSelect(name));
    g.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") {
        ev.preventDefault();
        this.onSelect(name);
      }
    });
    g.addEventListener("mouseenter", () => this.showTip(name, g));
    g.addEventListener("focus", () => this.showTip(name, g));
    g.addEventListener("mouseleave", () => this.hideTip());
    g.addEventListener("blur", () => this.hideTip());
    this.markers.set(name, m);
    return m;
  }

  showTip(name, g) {
    const status = regionStatus(name);
    const fig = regionFigures(name);
    const since = status.since ? duration(serverNow() - status.since) : "—";
    const label = status.drill ? `drill · ${status.state}` : undefined;
    this.tip.innerHTML = `<strong>${esc(name)}</strong> ${badge(status.shown, label)}` +
      `<div>for ${since} · ${pct(trafficShare(name, this.model))} of traffic</div>` +
      `<div>GPU ${fig.util === null ? "—" : `${fig.util.toFixed(0)}%`} · headroom ${pct(status.headroom)}` +
      ` · ${fig.healthy}/${fig.total} endpoints healthy` +
      `${fig.degraded ? `, ${fig.degraded} degraded` : ""}</div>` +
      `<div class="muted">${esc(status.reason)}</div>`;
    const box = g.getBoundingClientRect();
    const host = this.container.getBoundingClientRect();
    this.tip.hidden = false;
    const left = Math.min(box.left - host.left + box.width / 2 + 8, host.width - this.tip.offsetWidth - 4);
    this.tip.style.left = `${Math.max(4, left)}px`;
    this.tip.style.top = `${box.bottom - host.top + 6}px`;
  }

  hideTip() {
    this.tip.hidden = true;
  }

  zoneWeights(zone) {
    const lists = state.table?.zones?.[zone] || {};
    const names = this.model ? [this.model] : Object.keys(lists);
    const out = new Map();
    for (const model of names) {
      for (const w of lists[model] || []) {
        out.set(w.region, (out.get(w.region) || 0) + w.weight / names.length);
      }
    }
    return out;
  }

  drawFlows() {
    const seen = new Set();
    const zonesShown = new Set();
    for (const [zone, [lat, lon]] of Object.entries(state.zones)) {
      if (!state.table?.zones?.[zone]) continue;
      if (!this.continents && !isCountryZone(zone)) continue;
      const [x0, y0] = this.project(lon, lat);
      for (const [region, weight] of this.zoneWeights(zone)) {
        const row = state.regions.get(region);
        if (!row || weight < 0.005) continue;
        const [x1, y1] = this.project(row.lon, row.lat);
        const dx = x1 - x0, dy = y1 - y0;
        const dist = Math.hypot(dx, dy);
        if (dist < 3) continue;
        const cx = (x0 + x1) / 2 - dy * 0.18, cy = (y0 + y1) / 2 + dx * 0.18;
        const key = `${zone}>${region}`;
        let path = this.flows.get(key);
        if (!path) {
          path = el("path", { class: "flow" }, this.flowLayer);
          el("title", {}, path);
          this.flows.set(key, path);
        }
        path.setAttribute("d", `M${x0.toFixed(1)},${y0.toFixed(1)}Q${cx.toFixed(1)},${cy.toFixed(1)} ${x1.toFixed(1)},${y1.toFixed(1)}`);
        path.setAttribute("stroke-width", (1 + 7 * weight).toFixed(2));
        path.dataset.weight = weight.toFixed(4);
        path.firstChild.textContent = `${zoneLabel(zone)} → ${region}: ${pct(weight)}`;
        seen.add(key);
        zonesShown.add(zone);
      }
    }
    for (const [key, path] of this.flows) {
      if (!seen.has(key)) {
        path.remove();
        this.flows.delete(key);
      }
    }
    this.zoneLayer.replaceChildren();
    for (const zone of zonesShown) {
      const [lat, lon] = state.zones[zone];
      const [x, y] = this.project(lon, lat);
      el("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: 3, class: "zone-dot" }, this.zoneLayer);
      const t = el("text", { x: (x + 5).toFixed(1), y: (y + 3).toFixed(1), class: "zone-label" }, this.zoneLayer);
      t.textContent = zoneLabel(zone);
    }
  }
}
