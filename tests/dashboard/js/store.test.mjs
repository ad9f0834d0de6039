// Unit tests of the page's state (dashboard/static/dashboard/js/store.js): node --test.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  apply, clientZone, dataAge, nominal, regionFigures, state, trafficShare,
} from "../../../dashboard/static/dashboard/js/store.js";

const T0 = 1_800_000_000;
const iso = (t) => new Date(t * 1000).toISOString();

function snapshot() {
  return {
    type: "snapshot",
    user: { username: "v", role: "viewer", can_act: false, can_configure: false },
    table: {
      version: "v1", generated_at: iso(T0), source: "published",
      regions: { a: { state: "healthy", since: iso(T0 - 60), headroom: 0.5, capacity: 100 },
        b: { state: "healthy", since: iso(T0 - 60), headroom: 0.5, capacity: 100 } },
      zones: { DE: { m: [{ region: "a", weight: 0.75, reason: "" }, { region: "b", weight: 0.25, reason: "" }] },
        EU: { m: [{ region: "a", weight: 1, reason: "" }] },
        default: { m: [{ region: "b", weight: 1, reason: "" }] } },
    },
    zones: { DE: [51, 10] },
    regions: [{ name: "a", lat: 50, lon: 8, admin_state: "active", weight: 1 },
      { name: "b", lat: 40, lon: -75, admin_state: "active", weight: 1 }],
    endpoints: [
      { name: "a1", region: "a", gpu: "H100", gpus: 8, models: ["m"], admin_state: "active" },
      { name: "a2", region: "a", gpu: "H100", gpus: 8, models: ["m"], admin_state: "drained" },
      { name: "b1", region: "b", gpu: "H100", gpus: 2, models: ["m"], admin_state: "active" },
    ],
    gpu_profiles: [{ name: "H100", decode_tokens_per_s: 2400 }],
    residency: [],
    clients: [{ country: "DE", share: 0.5, zones: ["DE", "EU", "default"] },
      { country: "FR", share: 0.5, zones: ["FR", "EU", "default"] }],
    live: { at: T0, server_time: T0 + 0.2, tick_s: 1, regions: {},
      endpoints: { a1: { healthy: true, gpu_util_pct: 60, waiting: 2, running: 5, kv_cache_usage: 0.4,
        ttft_p50_ms: 100, ttft_p99_ms: 900, mem_used_mb: 10, mem_total_mb: 20 },
      b1: { healthy: true, gpu_util_pct: 20, waiting: 0, running: 1, kv_cache_usage: 0.2,
        ttft_p50_ms: 50, ttft_p99_ms: 300, mem_used_mb: 5, mem_total_mb: 20 } } },
    events: [{ id: 2, at: iso(T0), kind: "health", severity: "info", region: "a", endpoint: "", message: "x" }],
    history: [],
  };
}

test("traffic share weighs each client population by its zone's weights", () => {
  apply(snapshot());
  assert.equal(clientZone(state.clients[1]), "EU"); // FR has no zone of its own
  assert.equal(trafficShare("a"), 0.5 * 0.75 + 0.5 * 1);
  assert.equal(trafficShare("b"), 0.5 * 0.25);
});

test("region figures aggregate the endpoints' heartbeats", () => {
  apply(snapshot());
  const fig = regionFigures("a");
  assert.equal(fig.util, 60);
  assert.equal(fig.waiting, 2);
  assert.equal(fig.ttft99, 900);
  assert.equal(fig.healthy, 1);
  assert.equal(fig.total, 2);
  assert.equal(nominal("a"), 2400 * 8); // the drained endpoint does not count
});

test("an older table never replaces a newer one", () => {
  apply(snapshot());
  const older = { ...state.table, version: "v0", generated_at: iso(T0 - 5) };
  apply({ type: "table.update", version: "v0", table: older, diff: {}, transitions: [] });
  assert.equal(state.table.version, "v1");
  const newer = { ...state.table, version: "v2", generated_at: iso(T0 + 1) };
  apply({ type: "table.update", version: "v2", table: newer, diff: { summary: "moved" }, transitions: [] });
  assert.equal(state.table.version, "v2");
  assert.equal(state.diffs[0].summary, "moved");
});

test("events are kept once each, newest first", () => {
  apply(snapshot());
  const ev = (id, t) => ({ id, at: iso(t), kind: "action", severity: "info", region: "a", endpoint: "", message: `e${id}` });
  apply({ type: "events.new", events: [ev(3, T0 + 1), ev(2, T0)] });
  apply({ type: "events.new", events: [ev(3, T0 + 1), ev(4, T0 + 2)] });
  assert.deepEqual(state.events.map((e) => e.id), [4, 3, 2]);
});

test("the data age counts from the tick, not from the message", () => {
  apply(snapshot());
  const age = dataAge();
  assert.ok(age >= 0.2 && age < 1, `age ${age}`);
});
