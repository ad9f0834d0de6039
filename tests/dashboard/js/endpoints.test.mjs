// Unit tests of how endpoints are shown: the loop's shown state (healthy, degraded, down) in
// the region card's endpoint rows, the regions table's count and the map's tip: node --test.
import assert from "node:assert/strict";
import { test } from "node:test";

import { RegionCard } from "../../../dashboard/static/dashboard/js/regions.js";
import { endpointState } from "../../../dashboard/static/dashboard/js/states.js";
import { apply, regionFigures } from "../../../dashboard/static/dashboard/js/store.js";

const T0 = 1_800_000_000;
const iso = (t) => new Date(t * 1000).toISOString();
const ACTIVE = { admin_state: "active" };

function live(name, fields) {
  return { region: "a", healthy: true, evidence: true, reason: "ok", ...fields, name };
}

function snapshot(endpoints) {
  return {
    type: "snapshot",
    user: { username: "v", role: "viewer", can_act: false, can_configure: false },
    table: { version: "v1", generated_at: iso(T0), source: "published",
      regions: { a: { state: "degraded", since: iso(T0 - 60), headroom: 0, capacity: 100 } }, zones: {} },
    zones: {},
    regions: [{ name: "a", admin_state: "active", weight: 1 }],
    endpoints: ["a1", "a2", "a3", "a4"].map((name) => (
      { name, region: "a", gpu: "H100", gpus: 8, models: ["m"], admin_state: name === "a4" ? "drained" : "active" })),
    gpu_profiles: [], residency: [], clients: [],
    live: { at: T0, server_time: T0, tick_s: 1, regions: {}, endpoints },
    events: [], history: [],
  };
}

test("an endpoint the loop shows degraded is degraded, though it may take traffic", () => {
  const degraded = live("a1", { state: "degraded", strain: 3, reason: "TTFT p99 30.0 s over objective 10 s" });
  assert.deepEqual(endpointState(ACTIVE, degraded), { state: "degraded", label: "degraded" });
  assert.deepEqual(endpointState(ACTIVE, live("a1", { state: "healthy" })), { state: "healthy", label: "healthy" });
  assert.deepEqual(endpointState(ACTIVE, live("a1", { healthy: false, state: "down" })),
    { state: "down", label: "unhealthy" });
  // a loop that publishes no state yet (an older control plane): the verdict decides
  assert.deepEqual(endpointState(ACTIVE, live("a1", {})), { state: "healthy", label: "healthy" });
  assert.deepEqual(endpointState(ACTIVE, live("a1", { state: "sleepy", healthy: false })),
    { state: "down", label: "unhealthy" });
  assert.equal(endpointState({ admin_state: "drained" }, degraded).state, "drained");
  assert.equal(endpointState(ACTIVE, live("a1", { evidence: false, state: "unknown" })).state, "unknown");
});

test("the region's figures count degraded endpoints apart from healthy ones", () => {
  apply(snapshot({
    a1: live("a1", { state: "degraded" }), a2: live("a2", { state: "healthy" }),
    a3: live("a3", { healthy: false, state: "down" }), a4: live("a4", { state: "degraded" }),
  }));
  const fig = regionFigures("a");
  assert.deepEqual([fig.healthy, fig.degraded, fig.total], [1, 1, 4]); // a4 is drained
});

test("the region card shows a degraded endpoint with its badge and why", () => {
  apply(snapshot({
    a1: live("a1", { state: "degraded", reason: "ok; strain 0.90: healthy again under 0.8" }),
    a2: live("a2", { state: "healthy" }),
  }));
  const card = new RegionCard({});
  card.name = "a";
  const body = {};
  card.updateEndpoints(body);
  const row = body.innerHTML.split("<tr ").find((r) => r.startsWith('data-endpoint="a1"'));
  assert.match(row, /<td data-label="State" data-state="degraded"><span class="badge state-degraded"/);
  assert.match(row, /<span>degraded<\/span>/);
  assert.match(row, /healthy again under 0\.8/);
  assert.match(body.innerHTML, /data-endpoint="a2".*data-state="healthy"/);
});
