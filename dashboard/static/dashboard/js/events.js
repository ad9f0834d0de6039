// The events timeline: newest first, filtered by kind, severity, region and text, live.

import { esc, stamp } from "./format.js";
import { setHtml } from "./regions.js";
import { regionNames, state } from "./store.js";

const SHOWN = 200;
const SEVERITY_ICON = { info: "ℹ", warning: "▲", error: "✖" };

export class EventsView {
  constructor({ list, kind, severity, region, text }) {
    Object.assign(this, { list, kind, severity, region, text });
    for (const input of [kind, severity, region]) input.addEventListener("change", () => this.draw());
    text.addEventListener("input", () => this.draw());
    this.seen = new Set();
    this.first = true;
  }

  update(parts) {
    if (parts.has("all") || parts.has("config")) this.fillRegions();
    if (parts.has("all") || parts.has("events")) this.draw();
  }

  fillRegions() {
    const current = this.region.value;
    const names = regionNames();
    setHtml(this.region, `<option value="">all</option>${names.map((n) =>
      `<option${n === current ? " selected" : ""}>${esc(n)}</option>`).join("")}`);
  }

  draw() {
    const kind = this.kind.value, severity = this.severity.value, region = this.region.value;
    const text = this.text.value.trim().toLowerCase();
    const rows = state.events.filter((ev) => (!kind || ev.kind === kind)
      && (!severity || ev.severity === severity)
      && (!region || ev.region === region)
      && (!text || ev.message.toLowerCase().includes(text)
        || ev.endpoint.toLowerCase().includes(text)));
    if (!rows.length) {
      setHtml(this.list, `<li class="muted">${state.events.length ? "No event matches the filters." : "No event yet."}</li>`);
      return;
    }
    const html = rows.slice(0, SHOWN).map((ev) => {
      const fresh = !this.first && !this.seen.has(ev.id);
      const where = [ev.region, ev.endpoint].filter(Boolean).map(esc).join(" / ");
      return `<li class="ev sev-${esc(ev.severity)}${fresh ? " fresh" : ""}" data-event="${ev.id}" ` +
        `data-kind="${esc(ev.kind)}"><time datetime="${esc(ev.at)}">${esc(stamp(ev.at))}</time>` +
        `<span class="sev" title="${esc(ev.severity)}"><span aria-hidden="true">` +
        `${SEVERITY_ICON[ev.severity] || "•"}</span> ${esc(ev.severity)}</span>` +
        `<span class="kind">${esc(ev.kind)}</span><span class="where">${where}</span>` +
        `<span class="msg">${esc(ev.message)}</span></li>`;
    }).join("");
    for (const ev of rows) this.seen.add(ev.id);
    this.first = false;
    setHtml(this.list, html);
  }
}
