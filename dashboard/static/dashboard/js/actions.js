// Operator actions through the REST API with the session: each fetches its plan first
// (?dry_run=1), shows it, asks for confirmation, then applies; a 409 shows the refusal.

import { esc, pct, tokens } from "./format.js";
import { zoneLabel } from "./geo.js";
import { badge } from "./states.js";
import { state } from "./store.js";

const VERBS = { drain: "Drain", undrain: "Undrain", weight: "Change weight of" };

function csrfToken() {
  return document.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
}

function entries(list) {
  return list.length ? list.map((w) => `${esc(w.region)} ${pct(w.weight)}`).join(", ") : "none";
}

export function planHtml(plan, canForce) {
  const parts = [`<p><strong>${pct(plan.moved_share, 1)}</strong> of all client traffic moves.</p>`];
  if (plan.refusals.length) {
    parts.push(`<div class="warn" role="note"><strong>The safety valve refuses this change:</strong>` +
      `<ul>${plan.refusals.map((r) => `<li>${esc(r)}</li>`).join("")}</ul>` +
      `${canForce ? `<label class="check"><input type="checkbox" id="action-force"> Force it anyway (admin)</label>` : ""}</div>`);
  }
  if (plan.regions.length) {
    parts.push(`<p>Region states: ${plan.regions.map((r) => `${esc(r.region)} ${badge(r.before || "unknown")} → ` +
      `${badge(r.after || "unknown")}`).join("; ")}</p>`);
  }
  const moves = [...plan.moves].sort((a, b) => b.moved - a.moved);
  if (moves.length) {
    parts.push(`<div class="scroll"><table class="grid compact"><thead><tr><th scope="col">Zone / model</th>` +
      `<th scope="col">Moves</th><th scope="col">Before</th><th scope="col">After</th></tr></thead><tbody>` +
      moves.slice(0, 12).map((m) => `<tr><th scope="row">${esc(zoneLabel(m.zone))} / ${esc(m.model)}</th>` +
        `<td>${pct(m.moved, 1)}</td><td>${entries(m.before)}</td><td>${entries(m.after)}</td></tr>`).join("") +
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
