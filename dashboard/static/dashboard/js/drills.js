// The drills panel. Operators preview a drill's guardrails (POST drills/?dry_run=1), start it,
// follow it live (fault, detection, DNS moved per vantage point, recovery ramp; pushed over
// the WebSocket as drills.update) and abort it; everyone reads the past reports, each with its
// timeline chart (fetched from GET drills/ID/ when opened).

import { call, explain } from "./api.js";
import { timelineSvg } from "./drillchart.js";
import { clock, duration, esc, pct, stamp, tokens } from "./format.js";
import { setHtml } from "./regions.js";
import { badge } from "./states.js";
import { endpointsOf, regionNames, regionStatus, serverNow, state } from "./store.js";

const REGION_ONLY = new Set(["region_outage", "capacity_loss"]);
const PARAMS = {
  latency: { key: "added_ms", label: "added latency (ms)", min: 1, max: 60000, step: 50, value: 500 },
  capacity_loss: { key: "fraction", label: "share of endpoints", min: 0.01, max: 1, step: 0.05, value: 0.5 },
};
const VERDICT_STATE = { pass: "healthy", fail: "down", aborted: "degraded" };

const seconds = (v) => (v === null || v === undefined ? "—" : `${Number(v).toFixed(2)} s`);

export function verdictBadge(verdict) {
  return verdict ? badge(VERDICT_STATE[verdict] || "unknown", verdict) : `<span class="muted">—</span>`;
}

// The guardrails' answer to a preview, for people.
export function previewHtml(doc, canForce) {
  const g = doc.guardrails || {};
  const head = doc.allowed
    ? `<p class="ok"><strong>The guardrails allow this drill${doc.forced ? " (forced)" : ""}.</strong></p>`
    : `<div class="warn" role="note"><strong>The guardrails refuse this drill:</strong><ul>` +
      `${doc.refusals.map((r) => `<li>${esc(r.reason)}${r.forceable ? "" : " (never forceable)"}</li>`).join("")}</ul>` +
      `${doc.forceable && canForce ? `<label class="check"><input type="checkbox" id="drill-force"> Force it anyway (admin)</label>` : ""}</div>`;
  const zones = (g.residency_zones || []).map((z) => `<li>rule ${esc(z.rule)} (${esc(z.zones.join(", "))}): ` +
    `${tokens(z.capacity_during_fault_tokens_per_s)} left for ${tokens(z.demand_tokens_per_s)} asked</li>`).join("");
  return `${head}<p>Touches ${esc(doc.resolved.endpoints.join(", "))} in ${esc(doc.resolved.region)} for ` +
    `${duration(doc.duration_s)}. Capacity during the fault ${tokens(g.capacity_during_fault_tokens_per_s)} ` +
    `of ${tokens(g.capacity_tokens_per_s)}, for a demand of ${tokens(g.demand_tokens_per_s)} ` +
    `plus ${pct(g.margin ?? 0)} headroom.</p>${zones ? `<ul>${zones}</ul>` : ""}`;
}

function step(name, done, text) {
  return `<li data-step="${name}" class="${done ? "done" : "todo"}"><span aria-hidden="true">${done ? "✔" : "○"}</span> ${text}</li>`;
}

function timeLeft(drill, p) {
  if (!p || p.phase !== "fault") return "";
  const from = p.fault_at ?? p.injected_at;
  return from ? ` · ${duration(Math.max(0, from + drill.duration_s - serverNow()))} left` : "";
}

// The vantage points the target served before the fault, each with its DNS answer then and
// now; the others (usually most of them) in one line, by name.
function vantagesHtml(p, region) {
  const served = p.vantages.filter((v) => v.served_by_target);
  const others = p.vantages.filter((v) => !v.served_by_target).map((v) => esc(v.name));
  const rows = served.map((v) => `<tr data-vantage="${esc(v.name)}" data-moved="${v.moved_after_s !== null}">` +
    `<th scope="row">${esc(v.name)}</th><td data-label="DNS before">${esc(v.before.join(", ") || "—")}</td>` +
    `<td data-label="DNS now">${esc(v.now.join(", ") || "—")}</td>` +
    `<td data-label="Moved after">${v.moved_after_s === null ? "not yet" : seconds(v.moved_after_s)}</td></tr>`).join("");
  const table = served.length ? `<div class="scroll"><table class="grid compact vantages stack"><thead><tr>` +
    `<th scope="col">Vantage</th><th scope="col">DNS before</th><th scope="col">DNS now</th>` +
    `<th scope="col">Moved after</th></tr></thead><tbody>${rows}</tbody></table></div>` : "";
  const rest = others.length ? `<p class="muted others">Not answered with ${esc(region)} before the fault ` +
    `(${others.length}): ${others.join(", ")}</p>` : "";
  return table + rest;
}

// One drill under way, in three parts: the head (what it is, the Abort button) never changes,
// so that a click on Abort is not lost to a re-render; the status and the body change with
// every update (phase, time left, steps, vantage points).
export function liveHead(drill, canAct) {
  return `<strong>Drill ${esc(drill.id)}</strong> ${esc(drill.kind)} on ${esc(drill.target)} ` +
    `<span class="live-status"></span>` +
    `${canAct ? ` <button type="button" class="small danger" data-abort="${esc(drill.id)}">Abort</button>` : ""}`;
}

export function phaseOf(drill) {
  return drill.progress?.phase || (drill.status === "pending" ? "starting" : "baseline");
}

export function liveStatus(drill) {
  return `${badge("drill", drill.status)} phase <strong class="phase">${esc(phaseOf(drill))}</strong>` +
    timeLeft(drill, drill.progress);
}

function dnsText(p, region, served, moved, slowest) {
  if (!p.dns_measured) return "DNS not measured (no DNS server to ask)";
  if (!served.length) return `No vantage point was answered with ${esc(region)} before the fault`;
  return `DNS moved for ${moved.length}/${served.length} vantage points served by ${esc(region)}` +
    `${slowest === null ? "" : ` (slowest ${seconds(slowest)})`}`;
}

export function liveBody(drill) {
  const p = drill.progress;
  if (!p) return `<p class="muted">Measuring the baseline…</p>`;
  const status = regionStatus(drill.region);
  const served = p.vantages.filter((v) => v.served_by_target);
  const moved = served.filter((v) => v.moved_after_s !== null);
  const slowest = moved.length ? Math.max(...moved.map((v) => v.moved_after_s)) : null;
  const ramp = status.state === "recovering" ? `, slow start ${pct(status.ramp)}` : "";
  const steps = [
    step("fault", p.injected_at !== null, p.injected_at === null ? "Fault not injected yet" :
      `Fault injected at ${clock(p.injected_at)}, taken by ${p.taken}/${p.endpoints.length} agents`),
    step("detected", p.detected_after_s !== null, p.detected_after_s === null ? "Not detected yet" :
      `Detected after ${seconds(p.detected_after_s)}: <span class="muted">${esc(p.detected_by)}</span>`),
    step("dns", served.length > 0 && moved.length === served.length, dnsText(p, drill.region, served, moved, slowest)),
    step("restored", p.restored_at !== null, p.restored_at === null ? "Fault still on" : `Fault restored at ${clock(p.restored_at)}`),
    step("recovered", p.recovered_after_s !== null, p.recovered_after_s !== null
      ? `Recovered ${seconds(p.recovered_after_s)} after the restore`
      : `${esc(drill.region)} ${esc(status.state)}${ramp}; ${pct(p.region.share)} of traffic (${pct(p.region.share_before)} before)`),
  ];
  return `<ol class="drill-steps">${steps.join("")}</ol>${vantagesHtml(p, drill.region)}`;
}

export function liveHtml(drill, canAct) {
  return `<article class="drill-live" data-drill="${esc(drill.id)}" data-phase="${esc(phaseOf(drill))}">` +
    `<header>${liveHead(drill, canAct)}</header><div class="live-body">${liveBody(drill)}</div></article>`;
}

function recentRow(d) {
  const r = d.report || {};
  return `<tr data-drill="${esc(d.id)}" data-status="${esc(d.status)}"><th scope="row">${esc(d.id)}</th>` +
    `<td data-label="Drill">${esc(d.kind)} on ${esc(d.target)}</td><td data-label="Status">${esc(d.status)}</td>` +
    `<td data-label="Verdict">${verdictBadge(r.verdict)}</td><td data-label="Detected">${seconds(r.detected_after_s)}</td>` +
    `<td data-label="DNS moved">${seconds(r.dns_changed_after_s_max)}</td><td data-label="Recovered">${seconds(r.recovered_after_s)}</td>` +
    `<td data-label="Created">${esc(stamp(d.created_at))}<div class="sub">${esc(d.created_by)}</div></td>` +
    `<td data-label="Report">${d.report ? `<button type="button" class="small" data-report="${esc(d.id)}">Report</button>`
      : `<span class="muted">${d.status === "refused" ? esc(d.reason) : "—"}</span>`}</td></tr>`;
}

export function reportHtml(doc) {
  const r = doc.report;
  const figures = [["Detected after", seconds(r.detected_after_s)], ["Table changed after", seconds(r.table_changed_after_s)],
    ["DNS moved after (slowest)", seconds(r.dns_changed_after_s_max)], ["Recovered after", seconds(r.recovered_after_s)],
    ["Wrong answers", esc(r.wrong_answers)], ["Residency violations", esc(r.residency_violations)]];
  return `<h3>Report of drill ${esc(doc.id)}: ${esc(r.kind)} on ${esc(r.target)} ${verdictBadge(r.verdict)}</h3>` +
    `<dl class="figures">${figures.map(([k, v]) => `<div><dt>${k}</dt><dd>${v}</dd></div>`).join("")}</dl>` +
    `<ul class="reasons">${(r.reasons || []).map((x) => `<li>${esc(x)}</li>`).join("")}</ul>` +
    `${r.timeline ? timelineSvg(r) : `<p class="muted">No timeline: the drill ended before its fault.</p>`}`;
}

export class DrillsView {
  constructor({ root, api, toast }) {
    Object.assign(this, { root, api, toast });
    this.q = (sel) => root.querySelector(sel);
    this.shownReport = null;
    root.addEventListener("click", (ev) => {
      const abort = ev.target.closest("[data-abort]");
      if (abort) this.abort(abort.dataset.abort, abort);
      const open = ev.target.closest("[data-report]");
      if (open) this.openReport(open.dataset.report);
    });
    if (!this.q("#drill-form")) return;
    this.q("#drill-form").addEventListener("submit", (ev) => {
      ev.preventDefault(); // Enter in a field previews, never reloads the page
      this.preview();
    });
    this.q("#drill-kind").addEventListener("change", () => this.formChanged(true));
    for (const sel of ["#drill-target", "#drill-duration", "#drill-param"]) {
      this.q(sel).addEventListener("input", () => this.formChanged(false));
    }
    this.q("#drill-preview-btn").addEventListener("click", () => this.preview());
    this.q("#drill-start").addEventListener("click", () => this.start());
  }

  update(parts) {
    if (this.q("#drill-form") && (parts.has("all") || parts.has("config"))) this.fillTargets();
    if (parts.has("all") || parts.has("drills") || parts.has("clock") || parts.has("table")) this.drawActive();
    if (parts.has("all") || parts.has("drills")) this.drawRecent();
  }

  fillTargets() {
    const kind = this.q("#drill-kind").value;
    const select = this.q("#drill-target");
    const current = select.value;
    const option = (v) => `<option${v === current ? " selected" : ""}>${esc(v)}</option>`;
    const regions = `<optgroup label="Regions">${regionNames().map(option).join("")}</optgroup>`;
    const endpoints = REGION_ONLY.has(kind) ? "" : `<optgroup label="Endpoints">${regionNames()
      .flatMap((r) => endpointsOf(r).map((e) => option(e.name))).join("")}</optgroup>`;
    setHtml(select, regions + endpoints);
    const param = PARAMS[kind];
    this.q("#drill-param-wrap").hidden = !param;
    if (param && this.q("#drill-param").dataset.kind !== kind) {
      Object.assign(this.q("#drill-param"), { min: param.min, max: param.max, step: param.step, value: param.value });
      this.q("#drill-param").dataset.kind = kind;
      this.q("#drill-param-label").textContent = param.label;
    }
  }

  formChanged(kindChanged) {
    if (kindChanged) this.fillTargets();
    this.q("#drill-start").disabled = true; // a new preview first
    setHtml(this.q("#drill-preview"), "");
    this.showError("");
  }

  body() {
    const kind = this.q("#drill-kind").value;
    const body = { kind, target: this.q("#drill-target").value, duration_s: Number(this.q("#drill-duration").value) };
    const param = PARAMS[kind];
    if (param) body.params = { [param.key]: Number(this.q("#drill-param").value) };
    return body;
  }

  showError(text) {
    const box = this.q("#drill-error");
    box.textContent = text;
    box.hidden = !text;
  }

  async preview() {
    this.showError("");
    const { status, doc } = await call("POST", `${this.api}/drills/?dry_run=1`, this.body());
    if (status !== 200) {
      setHtml(this.q("#drill-preview"), "");
      this.showError(explain(status, doc));
      return;
    }
    setHtml(this.q("#drill-preview"), previewHtml(doc, state.user?.can_configure));
    const start = this.q("#drill-start");
    start.disabled = !doc.allowed;
    this.q("#drill-force")?.addEventListener("change", (ev) => { start.disabled = !ev.target.checked; });
  }

  async start() {
    const body = { ...this.body(), ...(this.q("#drill-force")?.checked ? { force: true } : {}) };
    this.q("#drill-start").disabled = true;
    const { status, doc } = await call("POST", `${this.api}/drills/`, body);
    if (status === 201) {
      setHtml(this.q("#drill-preview"), "");
      this.notify(`Drill ${doc.id} started: ${body.kind} on ${body.target} for ${duration(body.duration_s)}.`);
      return;
    }
    this.showError(status === 409 ? `Refused by the guardrails: ${doc.detail}` : explain(status, doc));
  }

  async abort(id, button) {
    button.disabled = true;
    const { status, doc } = await call("POST", `${this.api}/drills/${encodeURIComponent(id)}/abort`);
    this.notify(status === 200 ? `Drill ${id} aborted: its fault is rolled back.` : explain(status, doc));
  }

  async openReport(id) {
    const target = this.q("#drill-report");
    const { status, doc } = await call("GET", `${this.api}/drills/${encodeURIComponent(id)}/`);
    if (status !== 200 || !doc.report) {
      setHtml(target, `<p class="error">Could not load the report of drill ${esc(id)}: ${esc(explain(status, doc))}</p>`);
      return;
    }
    this.shownReport = id;
    setHtml(target, reportHtml(doc));
    target.scrollIntoView({ block: "nearest" });
  }

  // Each drill under way keeps its element (and its Abort button); only its parts change.
  drawActive() {
    const box = this.q("#drills-active");
    const active = state.drills.active;
    const ids = new Set(active.map((d) => String(d.id)));
    for (const node of box.querySelectorAll(".drill-live")) if (!ids.has(node.dataset.drill)) node.remove();
    let none = box.querySelector(".none");
    if (!none) {
      none = Object.assign(document.createElement("p"), { className: "muted none", textContent: "No drill under way." });
      box.prepend(none);
    }
    none.hidden = active.length > 0;
    for (const drill of active) {
      let node = box.querySelector(`.drill-live[data-drill="${CSS.escape(String(drill.id))}"]`);
      if (!node) {
        node = Object.assign(document.createElement("article"), { className: "drill-live" });
        node.dataset.drill = drill.id;
        node.innerHTML = `<header>${liveHead(drill, state.user?.can_act)}</header><div class="live-body"></div>`;
        box.appendChild(node);
      }
      node.dataset.phase = phaseOf(drill);
      setHtml(node.querySelector(".live-status"), liveStatus(drill));
      setHtml(node.querySelector(".live-body"), liveBody(drill));
    }
  }

  drawRecent() {
    const rows = state.drills.recent;
    setHtml(this.q("#drills-recent tbody"), rows.length ? rows.map(recentRow).join("")
      : `<tr><td colspan="9" class="muted">No drill yet.</td></tr>`);
  }

  notify(text) {
    this.toast.textContent = text;
    this.toast.hidden = false;
    clearTimeout(this.toastTimer);
    this.toastTimer = setTimeout(() => { this.toast.hidden = true; }, 6000);
  }
}
