// The page's state: what the WebSocket sent, and the figures derived from it.
// apply(message) updates it and tells subscribers which parts changed.

import { epoch } from "./format.js";
import { endpointState } from "./states.js";

const MAX_EVENTS = 500;
const MAX_DIFFS = 30;
export const WINDOW_S = 600; // charts keep the last ten minutes

export const state = {
  ready: false,
  user: null,
  tickS: 1,
  table: null,
  zones: {},
  regions: new Map(),
  endpoints: new Map(),
  byRegion: new Map(), // region -> its endpoints, by name
  profiles: new Map(),
  residency: [],
  clients: [],
  live: { at: null, regions: {}, endpoints: {} },
  events: [],
  eventIds: new Set(),
  history: [],
  diffs: [],
  drills: { active: [], recent: [] }, // under way (with progress), and the last ones
  util: new Map(), // region -> [[t, share 0..1], ...]
  share: new Map(), // "model|region" -> [[t, share], ...]; model "" = all models
  skew: 0, // server clock minus local clock, seconds
  lastDataLocal: null, // local ms when the newest tick's data arrived
  lastDataAge: 0, // how old that tick was when the server sent it, seconds
};

const listeners = new Set();

export function subscribe(fn) {
  listeners.add(fn);
}

function emit(parts) {
  for (const fn of listeners) fn(new Set(parts));
}

export function serverNow() {
  return Date.now() / 1000 + state.skew;
}

// Seconds since the newest data was produced (null before any tick).
export function dataAge() {
  if (state.lastDataLocal === null) return null;
  return (Date.now() - state.lastDataLocal) / 1000 + state.lastDataAge;
}

function applyConfig(doc) {
  state.regions = new Map(doc.regions.map((r) => [r.name, r]));
  state.endpoints = new Map(doc.endpoints.map((e) => [e.name, e]));
  state.byRegion = new Map();
  for (const e of [...doc.endpoints].sort((a, b) => a.name.localeCompare(b.name))) {
    if (!state.byRegion.has(e.region)) state.byRegion.set(e.region, []);
    state.byRegion.get(e.region).push(e);
  }
  state.profiles = new Map(doc.gpu_profiles.map((p) => [p.name, p]));
  state.residency = doc.residency;
  state.clients = doc.clients;
  if (doc.zones) state.zones = doc.zones;
}

function noteData(at, serverTime) {
  if (serverTime) state.skew = serverTime - Date.now() / 1000;
  if (at === null || at === undefined) return;
  state.lastDataLocal = Date.now();
  state.lastDataAge = Math.max(0, (serverTime ?? serverNow()) - at);
}

function addEvents(rows) {
  let added = 0;
  for (const ev of rows) {
    if (state.eventIds.has(ev.id)) continue;
    state.eventIds.add(ev.id);
    state.events.push(ev);
    added += 1;
  }
  if (!added) return false;
  state.events.sort((a, b) => (epoch(b.at) - epoch(a.at)) || (b.id - a.id));
  for (const ev of state.events.splice(MAX_EVENTS)) state.eventIds.delete(ev.id);
  return true;
}

function pushSample(map, key, t, value) {
  if (value === null || value === undefined || Number.isNaN(value)) return;
  let series = map.get(key);
  if (!series) map.set(key, (series = []));
  if (series.length && series[series.length - 1][0] >= t) return;
  series.push([t, value]);
  while (series.length && series[0][0] < t - WINDOW_S) series.shift();
}

function recordSamples(t) {
  for (const name of state.regions.keys()) {
    const fig = regionFigures(name);
    pushSample(state.util, name, t, fig.util === null ? null : fig.util / 100);
    for (const model of ["", ...models()]) {
      pushSample(state.share, `${model}|${name}`, t, trafficShare(name, model));
    }
  }
}

export function apply(msg) {
  switch (msg.type) {
    case "snapshot":
      state.user = msg.user;
      state.table = msg.table;
      state.zones = msg.zones;
      applyConfig(msg);
      state.live = msg.live;
      state.tickS = msg.live.tick_s || state.tickS;
      state.events = [];
      state.eventIds = new Set();
      addEvents(msg.events);
      state.history = msg.history;
      state.drills = msg.drills || { active: [], recent: [] };
      state.ready = true;
      noteData(msg.live.at, msg.live.server_time);
      if (msg.live.at) recordSamples(msg.live.at);
      emit(["all"]);
      break;
    case "table.update": {
      const current = state.table ? epoch(state.table.generated_at) : null;
      if (current !== null && epoch(msg.table.generated_at) < current) return;
      state.table = { ...msg.table, source: "published" };
      const d = msg.diff || {};
      state.diffs.unshift({
        version: msg.version, at: msg.table.generated_at, summary: d.summary || "",
        regions: d.regions || [], lists: (d.lists || []).slice(0, 12),
        listsChanged: d.lists_changed || 0,
      });
      state.diffs.splice(MAX_DIFFS);
      // A region changing state is always recorded in the history (controlrecord).
      if ((d.regions || []).length && !state.history.some((h) => h.version === msg.version)) {
        state.history.unshift({ version: msg.version, generated_at: msg.table.generated_at,
          reason: d.summary || "" });
        state.history.splice(MAX_DIFFS);
      }
      noteData(epoch(msg.table.generated_at), null);
      recordSamples(epoch(msg.table.generated_at));
      emit(["table"]);
      break;
    }
    case "live.update":
      state.live = msg;
      state.tickS = msg.tick_s || state.tickS;
      noteData(msg.at, msg.server_time);
      recordSamples(msg.at);
      emit(["live"]);
      break;
    case "events.new":
      if (addEvents(msg.events)) emit(["events"]);
      break;
    case "config.update":
      applyConfig(msg);
      emit(["config"]);
      break;
    case "drills.update":
      state.drills = { active: msg.active || [], recent: msg.recent || [] };
      emit(["drills"]);
      break;
    default:
      break;
  }
}

// --- derived figures ---------------------------------------------------------------------

export function models() {
  const out = new Set();
  for (const e of state.endpoints.values()) for (const m of e.models) out.add(m);
  return [...out].sort();
}

export function regionNames() {
  return [...state.regions.keys()].sort();
}

export function endpointsOf(region) {
  return state.byRegion.get(region) || [];
}

// Configured decode tokens/s of a region's active endpoints (marker size).
export function nominal(region) {
  let total = 0;
  for (const e of endpointsOf(region)) {
    const p = state.profiles.get(e.gpu);
    if (p && e.admin_state === "active") total += p.decode_tokens_per_s * e.gpus;
  }
  return total;
}

// The drill under way on a region (pending or running), or null: while it lasts, the region
// is shown as "drill" rather than as the outage the drill causes on purpose.
export function drillOn(region) {
  return state.drills.active.find((d) => d.region === region) ?? null;
}

// The drill under way on an endpoint's region that touches that endpoint, or null.
export function drillOnEndpoint(endpoint) {
  return state.drills.active.find((d) => (d.endpoints || []).includes(endpoint)) ?? null;
}

export function regionStatus(name) {
  const published = state.table?.regions?.[name];
  const machine = state.live.regions?.[name];
  const drill = drillOn(name);
  const current = published?.state ?? machine?.state ?? "unknown";
  return {
    state: current,
    shown: drill ? "drill" : current, // what the page draws: a drill is no outage
    drill,
    since: epoch(published?.since) ?? machine?.since ?? null,
    headroom: published?.headroom ?? null,
    capacity: published?.capacity ?? null,
    ramp: published?.ramp ?? 1,
    reason: published?.reason ?? "",
    paused: machine?.paused ?? false,
  };
}

// Aggregate the live figures of a region's endpoints.
export function regionFigures(name) {
  const fig = {
    util: null, memUsed: null, memTotal: null, waiting: null, running: null, kv: null,
    ttft50: null, ttft99: null, tokens: null, healthy: 0, degraded: 0, total: 0,
  };
  const utils = [], kvs = [], p50s = [];
  for (const e of endpointsOf(name)) {
    fig.total += 1;
    const live = state.live.endpoints?.[e.name];
    if (!live) continue;
    const shown = endpointState(e, live).state;
    if (shown === "healthy") fig.healthy += 1;
    if (shown === "degraded") fig.degraded += 1;
    if (live.gpu_util_pct !== null && live.gpu_util_pct !== undefined) utils.push(live.gpu_util_pct);
    if (live.mem_used_mb !== null && live.mem_used_mb !== undefined) {
      fig.memUsed = (fig.memUsed ?? 0) + live.mem_used_mb;
      fig.memTotal = (fig.memTotal ?? 0) + live.mem_total_mb;
    }
    if (live.waiting !== undefined) fig.waiting = (fig.waiting ?? 0) + live.waiting;
    if (live.running !== undefined) fig.running = (fig.running ?? 0) + live.running;
    if (live.tokens_per_s !== undefined) fig.tokens = (fig.tokens ?? 0) + live.tokens_per_s;
    if (live.kv_cache_usage !== undefined) kvs.push(live.kv_cache_usage);
    if (live.ttft_p50_ms !== undefined) p50s.push(live.ttft_p50_ms);
    if (live.ttft_p99_ms !== undefined) fig.ttft99 = Math.max(fig.ttft99 ?? 0, live.ttft_p99_ms);
  }
  const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
  fig.util = mean(utils);
  fig.kv = mean(kvs);
  fig.ttft50 = mean(p50s);
  return fig;
}

function weightIn(table, zone, model, region) {
  const lists = table.zones?.[zone];
  if (!lists) return 0;
  const names = model ? [model] : Object.keys(lists);
  if (!names.length) return 0;
  let total = 0;
  for (const m of names) {
    const entry = (lists[m] || []).find((w) => w.region === region);
    total += entry ? entry.weight : 0;
  }
  return total / names.length;
}

// The zone a client population resolves to in the table (country, continent, default).
export function clientZone(client, table = state.table) {
  return (client.zones || []).find((z) => table?.zones?.[z]) ?? null;
}

// Share of all client traffic (by the fleet's client mix) the table sends to a region.
export function trafficShare(region, model = "", table = state.table) {
  if (!table) return null;
  let total = 0, share = 0;
  if (state.clients.length) {
    for (const c of state.clients) {
      const zone = clientZone(c, table);
      if (!zone) continue;
      total += c.share;
      share += c.share * weightIn(table, zone, model, region);
    }
  } else {
    for (const zone of Object.keys(table.zones || {})) {
      total += 1;
      share += weightIn(table, zone, model, region);
    }
  }
  return total ? share / total : 0;
}
