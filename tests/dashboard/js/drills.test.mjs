// Unit tests of the drills panel, the drill banner state and the plan's live "before":
// node --test (no browser; the browser tests cover the page itself).
import assert from "node:assert/strict";
import { test } from "node:test";

import { liveMoves, movedBetween, movedShare, planHtml } from "../../../dashboard/static/dashboard/js/actions.js";
import { colours, spells, timelineSvg } from "../../../dashboard/static/dashboard/js/drillchart.js";
import { liveHtml, liveStatus, previewHtml, reportHtml } from "../../../dashboard/static/dashboard/js/drills.js";
import { apply, drillOn, drillOnEndpoint, regionStatus, state } from "../../../dashboard/static/dashboard/js/store.js";

const T0 = 1_800_000_000;
const iso = (t) => new Date(t * 1000).toISOString();

function snapshot(drills) {
  return {
    type: "snapshot",
    user: { username: "o", role: "operator", can_act: true, can_configure: false },
    table: {
      version: "v7", generated_at: iso(T0), source: "published",
      regions: { a: { state: "down", since: iso(T0 - 5), headroom: 0, capacity: 0, reason: "down: probe failed" },
        b: { state: "healthy", since: iso(T0 - 60), headroom: 0.5, capacity: 100 } },
      zones: { DE: { m: [{ region: "a", weight: 0.3, reason: "r" }, { region: "b", weight: 0.7, reason: "r" }] },
        default: { m: [{ region: "b", weight: 1, reason: "r" }] } },
    },
    zones: {},
    regions: [{ name: "a", admin_state: "active" }, { name: "b", admin_state: "active" }],
    endpoints: [{ name: "a1", region: "a", gpu: "H100", gpus: 8, models: ["m"], admin_state: "active" }],
    gpu_profiles: [], residency: [],
    clients: [{ country: "DE", share: 1, zones: ["DE", "default"] }],
    live: { at: T0, server_time: T0, tick_s: 1, regions: {}, endpoints: {} },
    events: [], history: [], drills,
  };
}

const running = {
  id: 12, kind: "region_outage", target: "a", region: "a", endpoints: ["a1"], status: "running",
  duration_s: 30,
  progress: {
    id: 12, phase: "fault", injected_at: T0 - 4, fault_at: T0 - 3.5, taken: 1, endpoints: ["a1"],
    detected_after_s: 2.1, detected_by: "region a: healthy → down: probe failed", restored_at: null,
    recovered_after_s: null, dns_measured: true,
    region: { name: "a", state: "down", ramp: 0, share: 0, share_before: 0.3 },
    vantages: [
      { name: "DE", country: "DE", before: ["a", "b"], now: ["b"], served_by_target: true, moved_after_s: 2.4 },
      { name: "US", country: "US", before: ["b"], now: ["b"], served_by_target: false, moved_after_s: null },
    ],
  },
};

test("a region under a drill is shown as 'drill', not 'down', until the drill ends", () => {
  apply(snapshot({ active: [running], recent: [] }));
  const status = regionStatus("a");
  assert.equal(status.state, "down");
  assert.equal(status.shown, "drill");
  assert.equal(drillOn("a").id, 12);
  assert.equal(drillOnEndpoint("a1").id, 12);
  assert.equal(regionStatus("b").shown, "healthy");
  apply({ type: "drills.update", active: [], recent: [{ ...running, status: "finished", progress: null }] });
  assert.equal(regionStatus("a").shown, "down");
  assert.equal(state.drills.recent[0].status, "finished");
});

test("the live view walks through fault, detection and DNS per vantage point", () => {
  apply(snapshot({ active: [running], recent: [] }));
  const html = liveHtml(running, true);
  assert.match(html, /data-phase="fault"/);
  assert.match(liveStatus(running), /phase <strong class="phase">fault<\/strong> · \d+s left/);
  assert.match(html, /data-step="fault" class="done"/);
  assert.match(html, /taken by 1\/1 agents/);
  assert.match(html, /data-step="detected" class="done".*Detected after 2\.10 s/);
  assert.match(html, /DNS moved for 1\/1 vantage points served by a \(slowest 2\.40 s\)/);
  assert.match(html, /data-step="restored" class="todo"/);
  assert.match(html, /<tr data-vantage="DE" data-moved="true">.*2\.40 s/);
  assert.doesNotMatch(html, /data-vantage="US"/); // never answered with a: named in one line
  assert.match(html, /Not answered with a before the fault \(1\): US/);
  assert.match(html, /data-abort="12"/);
  assert.doesNotMatch(liveHtml(running, false), /data-abort/); // viewers follow, read-only
});

test("a preview names each refusal and offers force only to admins, only when forceable", () => {
  const doc = {
    allowed: false, forceable: true, forced: false, duration_s: 30,
    resolved: { region: "a", endpoints: ["a1"] },
    refusals: [{ reason: "would leave residency zone IN with no region", forceable: true }],
    guardrails: { demand_tokens_per_s: 100, capacity_tokens_per_s: 300, capacity_during_fault_tokens_per_s: 200, margin: 0.1 },
  };
  assert.match(previewHtml(doc, false), /refuse this drill.*residency zone IN/s);
  assert.doesNotMatch(previewHtml(doc, false), /drill-force/);
  assert.match(previewHtml(doc, true), /id="drill-force"/);
  assert.match(previewHtml({ ...doc, allowed: true, refusals: [] }, false), /allow this drill/);
});

test("a plan's before is the live table shown on the page, and what moves is measured from it", () => {
  apply(snapshot({ active: [], recent: [] }));
  // The API compiled its "before" afresh (b at 0.6); the page shows the published table (0.7).
  const plan = {
    moved_share: 0.4, refusals: [], regions: [], capacity: {}, residency: { ok: true, stranded: [] },
    moves: [{ zone: "DE", model: "m", moved: 0.4, before: [{ region: "a", weight: 0.4 }, { region: "b", weight: 0.6 }],
      after: [{ region: "b", weight: 1 }] }],
  };
  const [move] = liveMoves(plan, state.table);
  assert.deepEqual(move.before, [{ region: "a", weight: 0.3 }, { region: "b", weight: 0.7 }]);
  assert.ok(Math.abs(move.moved - 0.3) < 1e-9);
  assert.ok(Math.abs(movedShare([move], state.table) - 0.3) < 1e-9);
  const html = planHtml(plan, false);
  assert.match(html, /<strong>30\.0%<\/strong> of all client traffic moves/);
  assert.match(html, /class="before">a 30\.0%, b 70\.0%</);
  assert.match(html, /live table <code>v7<\/code>/);
  assert.equal(movedBetween([], [{ region: "b", weight: 1 }]), 1);
  assert.equal(movedBetween([{ region: "b", weight: 1 }], [{ region: "b", weight: 1 }]), 0);
});

test("a report's timeline is drawn from the report alone", () => {
  const report = {
    kind: "region_outage", target: "a", region: "a", verdict: "pass", reasons: ["detected after 2.1 s"],
    detected_after_s: 2.1, dns_changed_after_s_max: 2.4, recovered_after_s: 31,
    timeline: {
      marks: { injected: -0.5, fault: 0, detected: 2.1, restored: 30, recovered: 61, end: 62 },
      share: [[-5, [0.3, "healthy"]], [2.3, [0, "down"]], [31, [0.1, "recovering"]]],
      dns: { DE: [[-5, "a,b"], [2.4, "b"], [40, "a,b"]], US: [[-5, "b"], [10, "!timeout"]] },
    },
  };
  assert.deepEqual(spells([[0, "x"], [5, "y"]], 9), [[0, 5, "x"], [5, 9, "y"]]);
  assert.deepEqual([...colours(report.timeline.dns).keys()], ["-", "a,b", "b"]);
  const svg = timelineSvg(report);
  assert.match(svg, /<svg class="drill-timeline"/);
  assert.equal((svg.match(/data-vantage="DE"/g) || []).length, 3);
  assert.equal((svg.match(/data-mark=/g) || []).length, 5);
  assert.doesNotMatch(svg, /data-vantage="US"/); // never answered with a: counted, not drawn
  assert.match(svg, /1 other vantage points, never answered with a/);
  const errors = timelineSvg({ ...report, region: "b" }); // every vantage was answered with b
  assert.match(errors, /<rect[^>]*fill="#222222" data-vantage="US"/); // the error bar
  assert.match(reportHtml({ id: 3, report }), /Report of drill 3.*pass/s);
});
