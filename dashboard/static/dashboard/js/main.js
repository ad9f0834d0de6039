// The dashboard page: wires the WebSocket, the state and the views together.

import { Actions } from "./actions.js";
import { LineChart } from "./charts.js";
import { DrillsView } from "./drills.js";
import { clock, duration, esc } from "./format.js";
import { EventsView } from "./events.js";
import { FleetMap } from "./map.js";
import { RegionCard, RegionsTable, setHtml } from "./regions.js";
import { RoutingView } from "./routing.js";
import { LiveSocket } from "./socket.js";
import {
  apply, dataAge, endpointsOf, models, regionNames, serverNow, state, subscribe,
} from "./store.js";

const STALE_TICKS = 3;
const $ = (id) => document.getElementById(id);
const boot = JSON.parse($("dashboard-boot").textContent);
state.tickS = boot.tick_s;

let socket;
let views;
let pending = new Set();
let firstRender = true;

function select(name) {
  views.map.select(name);
  views.table.select(name);
  views.card.show(name);
  document.body.dataset.selected = name;
}

function fillSelect(select, values, labelAll) {
  const current = select.value;
  setHtml(select, (labelAll ? `<option value="">${esc(labelAll)}</option>` : "") +
    values.map((v) => `<option${v === current ? " selected" : ""}>${esc(v)}</option>`).join(""));
}

function fillControls() {
  fillSelect($("map-model"), models(), "all models");
  if ($("act-region")) {
    fillSelect($("act-region"), regionNames());
    fillSelect($("act-endpoint"), regionNames().flatMap((r) => endpointsOf(r).map((e) => e.name)));
  }
}

function drawCharts() {
  const now = serverNow();
  const names = regionNames();
  const model = views.map.model;
  views.util.update(names.map((name, index) => ({
    key: name, label: name, index, points: state.util.get(name) || [],
  })), now);
  views.share.update(names.map((name, index) => ({
    key: name, label: name, index, points: state.share.get(`${model}|${name}`) || [],
  })), now);
  $("chart-share-model").textContent = model ? `(${model})` : "(all models)";
}

function render() {
  const parts = pending;
  pending = new Set();
  if (!state.ready) return;
  if (parts.has("all") || parts.has("config")) fillControls();
  views.map.update(parts);
  views.table.update();
  views.card.update();
  views.routing.update(parts);
  views.events.update(parts);
  views.drills.update(parts);
  if (parts.has("table") || parts.has("all")) views.actions?.refresh();
  drawDrillBanner();
  drawCharts();
  if (firstRender) {
    firstRender = false;
    document.body.dataset.ready = "true";
    performance.mark("dashboard-first-render");
    const first = regionNames()[0];
    if (first && !views.card.name) select(first);
  }
}

// The header's drill banner: while a drill runs, whatever it does to its region is practice.
function drawDrillBanner() {
  const banner = $("drill-banner");
  const active = state.drills.active;
  banner.hidden = active.length === 0;
  document.body.classList.toggle("drill-running", active.length > 0);
  setHtml(banner, active.map((d) => {
    const phase = d.progress?.phase || d.status;
    return `<span class="drill-flag" data-drill="${esc(d.id)}">Drill ${esc(d.id)} under way: ${esc(d.kind)} ` +
      `on ${esc(d.target)} (${esc(phase)}). ${esc(d.region)} is marked “drill”: practice, not an outage. ` +
      `<a href="#drills-panel">Follow it</a></span>`;
  }).join(""));
}

function schedule(parts) {
  const empty = pending.size === 0;
  for (const p of parts) pending.add(p);
  if (empty) requestAnimationFrame(render);
}

function showStatus(status) {
  const conn = $("conn");
  const text = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…", denied: "signed out" };
  conn.textContent = text[status] || status;
  conn.className = `conn conn-${status}`;
  updateBanner();
}

// The stale banner: shown when the newest data is older than a few ticks, or the socket is down.
function updateBanner() {
  const banner = $("stale");
  const age = dataAge();
  const limit = STALE_TICKS * Math.max(1, state.tickS);
  let text = "";
  if (socket && !socket.connected && state.ready) {
    const wait = socket.retryIn;
    text = `Connection lost: data may be stale. Reconnecting${wait === null ? "…" : ` in ${Math.ceil(wait)} s`}.`;
  } else if (state.ready && age === null) {
    text = "Waiting for the first control-loop tick: states and weights come from the configuration only.";
  } else if (state.ready && age > limit) {
    text = `Stale: the newest data is ${duration(age)} old (last tick at ${clock(serverNow() - age)}); ` +
      `the control loop may have stopped.`;
  }
  banner.hidden = !text;
  banner.textContent = text;
  document.body.classList.toggle("is-stale", Boolean(text));
}

function start(world) {
  views = {
    map: new FleetMap($("map"), $("map-tip"), $("legend"), world, select),
    table: new RegionsTable($("regions-table"), select),
    card: new RegionCard($("region-card")),
    routing: new RoutingView({
      grid: $("routing-table"), notes: $("routing-notes"), viewing: $("routing-viewing"),
      diffs: $("diffs"), history: $("history"), version: $("table-version"),
      source: $("table-source"), api: boot.api, reasons: $("routing-reasons"),
    }),
    events: new EventsView({
      list: $("events"), kind: $("ev-kind"), severity: $("ev-severity"),
      region: $("ev-region"), text: $("ev-text"),
    }),
    drills: new DrillsView({ root: $("drills-panel"), api: boot.api, toast: $("toast") }),
    util: new LineChart($("chart-util"), { label: "GPU utilisation by region, last ten minutes" }),
    share: new LineChart($("chart-share"), { label: "Traffic share by region, last ten minutes" }),
  };
  if ($("action-dialog")) {
    views.actions = new Actions({ dialog: $("action-dialog"), api: boot.api, toast: $("toast") });
  }
  $("map-model").addEventListener("change", (ev) => {
    views.map.setModel(ev.target.value);
    drawCharts();
  });
  $("map-continents").addEventListener("change", (ev) => views.map.setContinents(ev.target.checked));
  subscribe(schedule);
  socket = new LiveSocket(boot.ws_path, {
    onMessage: apply,
    onStatus: showStatus,
    onDenied: () => { location.href = boot.login; },
  });
  socket.start();
  // Local timer only (no network): relative times, chart windows and the stale banner.
  setInterval(() => {
    updateBanner();
    if (state.ready) schedule(["clock"]);
  }, 1000);
}

fetch(boot.world, { credentials: "same-origin" })
  .then((res) => res.json())
  .then(start)
  .catch((err) => {
    $("map").textContent = `The world map could not be loaded: ${err.message}`;
    start({ width: 960, height: 500, scale: 153, translate: [480, 250], sphere: "", graticule: "", countries: [] });
  });
