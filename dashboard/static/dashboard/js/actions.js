// Operator actions through the REST API with the session: each fetches its plan first
// (?dry_run=1), shows it, asks for confirmation, then applies; a 409 shows the refusal.
//
// A plan's "before" is the live table this page shows, not the API's own "before" (a table
// compiled afresh, without the shift limit and slow start of the published one): the figures
// in the dialog must match the routing table under it. "After" is what the next tick would
// compile with the change; what moves is measured between the two, as the engine measures it.

import { esc, pct, tokens } from "./format.js";
import { zoneLabel } from "./geo.js";
import { CHANGED } from "./routing.js";
import { badge } from "./states.js";
import { clientZone, models, state } from "./store.js";

const VERBS = { drain: "Drain", undrain: "Undrain", weight: "Change weight of" };

function csrfToken() {
  return document.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
}

function entries(list) {
  return list.length ? list.map((w) => `${esc(w.region)} ${pct(w.weight, 1)}`).join(", ") : "none";
}

// The share of a list's traffic that moves from ``before`` to ``after`` (half the L1 distance;
// all of it to or from an empty list), as trafficmgr/routing/table_diff.py measures it.
export function movedBetween(before, after) {
  if (!before.length || !after.length) return before.length || after.length ? 1 : 0;
  const a = new Map(before.map((w) => [w.region, w.weight]));
  const b = new Map(after.map((w) => [w.region, w.weight]));
  let moved = 0;
  for (const region of new Set([...a.keys(), ...b.keys()])) {
    moved += Math.abs((a.get(region) ?? 0) - (b.get(region) ?? 0));
  }
  return Math.min(1, moved / 2);
}

// The plan's moves with "before" taken from the live table (when the page has one).
export function liveMoves(plan, live) {
  return plan.moves.map((m) => {
    if (!live?.zones) return m;
    const before = (live.zones[m.zone]?.[m.model] || []).map((w) => ({ region: w.region, weight: w.weight }));
    return { ...m, before, moved: movedBetween(before, m.after) };
  });
}

// The share of all client traffic that moves: client shares weigh their zone's lists, each
// model alike (every list alike without a client mix), as regions/loop/actions.py weighs it.
export function movedShare(moves, live, clients = state.clients, names = models()) {
  const moved = new Map(moves.map((m) => [`${m.zone}|${m.model}`, m.moved]));
  if (!live?.zones || !names.length) return null;
  if (clients.length) {
    let total = 0, share = 0;
    for (const c of clients) {
      total += c.share;
      const zone = clientZone(c, live);
      if (zone === null) continue;
      share += c.share * names.reduce((sum, m) => sum + (moved.get(`${zone}|${m}`) ?? 0), 0) / names.length;
    }
    return total ? share / total : 0;
  }
  const lists = Object.entries(live.zones).flatMap(([z, ls]) => Object.keys(ls).map((m) => `${z}|${m}`));
  return lists.length ? lists.reduce((sum, k) => sum + (moved.get(k) ?? 0), 0) / lists.length : 0;
}

export function planHtml(plan, canForce, live = state.table) {
  const moves = liveMoves(plan, live).filter((m) => m.moved > 0).sort((a, b) => b.moved - a.moved);
  const share = live?.zones ? movedShare(moves, live) : plan.moved_share;
  const parts = [`<p><strong>${pct(share, 1)}</strong> of all client traffic moves.</p>`];
  if (live?.version) {
    parts.push(`<p class="muted">Before: the live table <code>${esc(live.version)}</code> shown on ` +
      `this page; after: what the next tick compiles with the change.</p>`);
  }
  if (plan.refusals.length) {
    parts.push(`<div class="warn" role="note"><strong>The safety valve refuses this change:</strong>` +
      `<ul>${plan.refusals.map((r) => `<li>${esc(r)}</li>`).join("")}</ul>` +
      `${canForce ? `<label class="check"><input type="checkbox" id="action-force"> Force it anyway (admin)</label>` : ""}</div>`);
  }
  if (plan.regions.length) {
    parts.push(`<p>Region states: ${plan.regions.map((r) => `${esc(r.region)} ${badge(r.before || "unknown")} → ` +
      `${badge(r.after || "unknown")}`).join("; ")}</p>`);
  }
  if (moves.length) {
    parts.push(`<div class="scroll"><table class="grid compact stack"><thead><tr><th scope="col">Zone / model</th>` +
      `<th scope="col">Moves</th><th scope="col">Before</th><th scope="col">After</th></tr></thead><tbody>` +
      moves.slice(0, 12).map((m) => `<tr data-zone="${esc(m.zone)}" data-model="${esc(m.model)}">` +
        `<th scope="row">${esc(zoneLabel(m.zone))} / ${esc(m.model)}</th>` +
        `<td data-label="Moves">${pct(m.moved, 1)}</td><td data-label="Before" class="before">${entries(m.before)}</td>` +
        `<td data-label="After">${entries(m.after)}</td></tr>`).join("") +
      `</tbody></table></div>${moves.length > 12 ? `<p class="muted">and ${moves.length - 12} more lists</p>` : ""}`);
  } else {
    parts.push(`<p>No routing list changes.</p>`);
  }
  const caps = Object.entries(plan.capacity || {});
  if (caps.length) {
    parts.push(`<p>Capacity left: ${caps.map(([model, c]) => `${esc(model)} ${tokens(c.after)}` +
      `${c.left_share === null ? "" : ` (${pct(c.left_share)})`}`).join("; ")}</p>`);
  }
  parts.push(plan.residency.ok
    ? `<p>Residency: every strict zone keeps a region.</p>`
    : `<p class="error">Residency: ${plan.residency.stranded.map((s) =>
      `${esc(zoneLabel(s.zone))} (${esc(s.rule)}) loses its last region for ${esc(s.model)}`).join("; ")}</p>`);
  if (plan.note) parts.push(`<p class="muted">${esc(plan.note)}</p>`);
  return parts.join("");
}

export class Actions {
  constructor({ dialog, api, toast }) {
    this.dialog = dialog;
    this.api = api;
    this.toast = toast;
    this.q = (id) => dialog.querySelector(`#${id}`);
    this.current = null;
    document.addEventListener("click", (ev) => {
      const button = ev.target.closest("[data-action]");
      if (!button) return;
      const target = button.dataset.from
        ? document.getElementById(button.dataset.from)?.value : button.dataset.target;
      if (target) this.open(button.dataset.action, button.dataset.kind, target, button);
    });
    this.q("action-plan-btn").addEventListener("click", () => this.fetchPlan());
    this.q("action-confirm").addEventListener("click", () => this.confirm());
    dialog.addEventListener("close", () => this.current?.opener?.focus?.());
  }

  url(change, flags) {
    return `${this.api}/${change.kind}s/${encodeURIComponent(change.target)}/${change.verb}${flags}`;
  }

  async post(change, flags) {
    const body = change.verb === "weight" ? JSON.stringify({ weight: change.weight }) : "{}";
    const res = await fetch(this.url(change, flags), {
      method: "POST", credentials: "same-origin", body,
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
    });
    let doc = {};
    try {
      doc = await res.json();
    } catch {
      doc = { detail: `HTTP ${res.status}` };
    }
    return { status: res.status, doc };
  }

  open(verb, kind, target, opener) {
    this.current = { verb, kind, target, opener, weight: null, plan: null };
    this.q("action-title").textContent = `${VERBS[verb] || verb} ${kind} ${target}`;
    this.q("action-plan").innerHTML = "";
    this.showError("");
    const confirm = this.q("action-confirm");
    confirm.disabled = true;
    confirm.textContent = `Confirm: ${verb} ${target}`;
    const input = this.q("action-input");
    const planBtn = this.q("action-plan-btn");
    if (verb === "weight") {
      const weight = state.regions.get(target)?.weight ?? 1;
      input.innerHTML = `<label>New weight (0–1000) <input id="action-weight" type="number" min="0" ` +
        `max="1000" step="0.1" value="${weight}" required></label>`;
      planBtn.hidden = false;
      input.querySelector("input").addEventListener("input", () => {
        confirm.disabled = true;
        this.q("action-plan").innerHTML = "";
      });
    } else {
      input.innerHTML = "";
      planBtn.hidden = true;
    }
    if (!this.dialog.open) this.dialog.showModal();
    if (verb === "weight") input.querySelector("input").focus();
    else this.fetchPlan();
  }

  showError(text) {
    const box = this.q("action-error");
    box.textContent = text;
    box.hidden = !text;
  }

  async fetchPlan() {
    const change = this.current;
    if (!change) return;
    if (change.verb === "weight") {
      const value = Number(this.q("action-weight").value);
      if (!Number.isFinite(value) || value < 0 || value > 1000) {
        this.showError("The weight must be a number from 0 to 1000.");
        return;
      }
      change.weight = value;
    }
    this.showError("");
    this.q("action-plan").innerHTML = `<p class="muted">Planning…</p>`;
    const { status, doc } = await this.post(change, "?dry_run=1").catch((err) =>
      ({ status: 0, doc: { detail: err.message } }));
    if (change !== this.current) return;
    if (status !== 200) {
      this.q("action-plan").innerHTML = "";
      this.showError(this.explain(status, doc));
      return;
    }
    change.plan = doc.plan;
    this.q("action-plan").innerHTML = planHtml(doc.plan, state.user?.can_configure);
    const confirm = this.q("action-confirm");
    confirm.disabled = false;
    confirm.focus();
  }

  // A new live table while a plan is open: its "before" follows the table under the dialog.
  refresh() {
    const change = this.current;
    if (!change?.plan || !this.dialog.open) return;
    const force = this.q("action-force")?.checked;
    this.q("action-plan").innerHTML = planHtml(change.plan, state.user?.can_configure);
    if (force && this.q("action-force")) this.q("action-force").checked = true;
  }

  explain(status, doc) {
    if (status === 403) return `Refused: your role may not do this. ${doc.detail || ""}`;
    if (status === 409) return `Refused by the control plane: ${doc.detail || "conflict"}`;
    if (status === 0) return `Network error: ${doc.detail}`;
    return `Error ${status}: ${doc.detail || "unexpected answer"}`;
  }

  async confirm() {
    const change = this.current;
    if (!change || !change.plan) return;
    const force = this.q("action-force")?.checked ? "?force=1" : "";
    const button = this.q("action-confirm");
    button.disabled = true;
    const { status, doc } = await this.post(change, force).catch((err) =>
      ({ status: 0, doc: { detail: err.message } }));
    if (change !== this.current) return;
    if (status === 200) {
      this.dialog.close();
      const what = `${change.verb} ${change.kind} ${change.target}`;
      if (doc.applied) document.dispatchEvent(new CustomEvent(CHANGED, { detail: `${what} applied` }));
      this.notify(doc.applied
        ? `Applied: ${what}; ${pct(doc.plan.moved_share)} of traffic moves over the next ticks.`
        : `Nothing to do: ${what} is already in effect.`);
      return;
    }
    this.showError(this.explain(status, doc));
    button.disabled = status !== 409 || !this.q("action-force");
  }

  notify(text) {
    this.toast.textContent = text;
    this.toast.hidden = false;
    clearTimeout(this.toastTimer);
    this.toastTimer = setTimeout(() => { this.toast.hidden = true; }, 6000);
  }
}
