// The routing view: the table per client zone × model (weights and reasons), the recent
// changes the control loop pushed, and the recorded history (any version can be opened).
// Following the live table is the default: a recorded version stays open until a change
// (a region changing state, or an action or drill started from this page) brings the live
// table back, unless "stay on this version" is ticked. Each weight's reason opens with a
// tap or a key (no hover titles: phones have no hover).

export const CHANGED = "dashboard:changed"; // document event: a change was applied here
const NOTICE_MS = 12000;

import { clock, esc, pct, stamp } from "./format.js";
import { CONTINENTS, zoneLabel } from "./geo.js";
import { setHtml } from "./regions.js";
import { badge } from "./states.js";
import { models, state } from "./store.js";

function zoneOrder(zones) {
  const clientZones = state.clients.map((c) => (c.zones || [])[0]).filter(Boolean);
  const rank = (z) => {
    const i = clientZones.indexOf(z);
    if (i >= 0) return [0, i];
    if (z === "default") return [3, 0];
    return [CONTINENTS.has(z) ? 2 : 1, 0];
  };
  return [...zones].sort((a, b) => {
    const [ra, ia] = rank(a), [rb, ib] = rank(b);
    return ra - rb || ia - ib || a.localeCompare(b);
  });
}

export class RoutingView {
  constructor({ grid, notes, viewing, diffs, history, version, source, api, reasons }) {
    Object.assign(this, { grid, notes, viewing, diffs, history, version, source, api });
    reasons.addEventListener("change", () => grid.classList.toggle("show-reasons", reasons.checked));
    this.recorded = null; // a recorded version being viewed instead of the live table
    this.stay = false; // keep the recorded version open whatever changes
    this.notice = null; // { text, until }: why the view went back to live
    this.opened = new Set(); // "zone|model|region" entries whose reason is shown
    history.addEventListener("click", (ev) => {
      const button = ev.target.closest("[data-version]");
      if (button) this.open(button.dataset.version);
    });
    viewing.addEventListener("click", (ev) => {
      if (ev.target.closest("[data-live]")) this.backToLive(null);
    });
    viewing.addEventListener("change", (ev) => {
      if (ev.target.matches("[data-stay]")) this.stay = ev.target.checked;
    });
    grid.addEventListener("click", (ev) => {
      const toggle = ev.target.closest("[data-reason-key]");
      if (toggle) this.toggleReason(toggle);
    });
    document.addEventListener(CHANGED, (ev) => this.followLive(ev.detail || "a change was applied"));
  }

  toggleReason(toggle) {
    const key = toggle.dataset.reasonKey;
    const open = !this.opened.has(key);
    if (open) this.opened.add(key);
    else this.opened.delete(key);
    toggle.setAttribute("aria-expanded", String(open));
    toggle.closest(".entry").classList.toggle("open", open);
  }

  backToLive(why) {
    this.recorded = null;
    this.stay = false;
    this.notice = why ? { text: `Back to the live table: ${why}.`, until: Date.now() + NOTICE_MS } : null;
    this.update(new Set(["all"]));
  }

  // After a change, show the live table again (unless asked to stay on the recorded one).
  followLive(why) {
    if (this.recorded && !this.stay) this.backToLive(why);
  }

  async open(version) {
    try {
      const res = await fetch(`${this.api}/routing/history/${encodeURIComponent(version)}`, {
        credentials: "same-origin", headers: { Accept: "application/json" },
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      this.recorded = await res.json();
      this.notice = null;
    } catch (err) {
      setHtml(this.viewing, `<span class="error">could not load ${esc(version)}: ${esc(err.message)}</span>`);
      return;
    }
    this.update(new Set(["all"]));
  }

  update(parts) {
    const live = state.table;
    if (!live) return;
    const changed = parts.has("table") && (state.diffs[0]?.regions || []).length > 0;
    if (changed && this.recorded && !this.stay) {
      this.recorded = null;
      this.notice = { text: `Back to the live table: ${state.diffs[0].summary || "a region changed state"}.`,
        until: Date.now() + NOTICE_MS };
      parts = new Set(["all"]);
    }
    this.version.textContent = live.version;
    this.source.textContent = live.source === "static" ? "(static: no tick yet)" : `at ${clock(live.generated_at)}`;
    const table = this.recorded ? this.recorded.table : live;
    this.drawViewing(live);
    if (parts.has("all") || parts.has("table") || parts.has("config")) this.drawGrid(table);
    if (parts.has("all") || parts.has("table")) {
      this.drawDiffs();
      this.drawHistory();
    }
  }

  // The bar over a recorded version is built once per version (its button and checkbox stay
  // the same elements while tables arrive); only the live version it names changes.
  drawViewing(live) {
    this.viewing.closest(".panel")?.classList.toggle("viewing-history", Boolean(this.recorded));
    if (this.recorded) {
      const version = String(this.recorded.version);
      if (this.viewing.querySelector(".history-bar")?.dataset.version !== version) {
        setHtml(this.viewing, `<div class="history-bar" role="status" data-version="${esc(version)}">` +
          `<strong>Not live:</strong> recorded version <code>${esc(version)}</code> of ` +
          `${esc(stamp(this.recorded.generated_at))}; the live table is <code class="live-version"></code>. ` +
          `<button type="button" class="primary" data-live>Back to live</button> ` +
          `<label class="check"><input type="checkbox" data-stay${this.stay ? " checked" : ""}> ` +
          `stay on this version when the table changes</label></div>`);
      }
      this.viewing.querySelector(".live-version").textContent = live.version;
      return;
    }
    const notice = this.notice && this.notice.until > Date.now()
      ? ` <span class="notice" role="status">${esc(this.notice.text)}</span>` : "";
    setHtml(this.viewing, `live · version <code>${esc(live.version)}</code>${notice}`);
  }

  // The grid is built once per shape (zones × models) and then updated in place: a weight
  // changes its bar and figure, not its element, so that a tap on an entry (to open its
  // reason) is never lost to the next table (one a second).
  drawGrid(table) {
    const names = models();
    const zones = zoneOrder(Object.keys(table.zones || {}));
    const shape = JSON.stringify([zones, names]);
    if (shape !== this.shape) {
      this.shape = shape;
      const head = `<thead><tr><th scope="col">Client zone</th>${names.map((m) =>
        `<th scope="col">${esc(m)}</th>`).join("")}</tr></thead>`;
      const rows = zones.map((zone) => `<tr><th scope="row">${esc(zoneLabel(zone))}</th>${names.map((model) =>
        `<td data-zone="${esc(zone)}" data-model="${esc(model)}" data-label="${esc(model)}"></td>`).join("")}</tr>`);
      this.grid.innerHTML = `${head}<tbody>${rows.join("")}</tbody>`;
    }
    for (const td of this.grid.querySelectorAll("td[data-zone]")) {
      this.drawCell(td, table.zones[td.dataset.zone]?.[td.dataset.model], table.notes?.[td.dataset.zone]?.[td.dataset.model]);
    }
    const notes = Object.entries(table.notes || {}).flatMap(([zone, byModel]) =>
      Object.entries(byModel).map(([model, note]) => `${zoneLabel(zone)}/${model}: ${note}`));
    setHtml(this.notes, notes.length ? `<details><summary>${notes.length} note` +
      `${notes.length > 1 ? "s" : ""} (empty or fail-open lists)</summary><ul>${notes.map((n) =>
        `<li>${esc(n)}</li>`).join("")}</ul></details>` : "");
  }

  drawCell(td, list, note) {
    const empty = !list || !list.length;
    td.classList.toggle("empty", empty);
    if (empty) {
      delete td.dataset.regions;
      setHtml(td, `<span class="muted">${esc(note || "no region")}</span>`);
      return;
    }
    const regions = list.map((w) => w.region).join(",");
    if (td.dataset.regions !== regions) { // other regions: new entries
      td.dataset.regions = regions;
      const html = list.map((w) => this.entryHtml(td.dataset.zone, td.dataset.model, w)).join("");
      setHtml(td, ""); // forget the note it may have shown: entries change in place from here
      td.innerHTML = html;
    }
    const entries = td.querySelectorAll(".entry");
    list.forEach((w, i) => {
      const entry = entries[i];
      if (entry.dataset.weight === String(w.weight) && entry.dataset.reason === w.reason) return;
      entry.dataset.weight = w.weight;
      entry.dataset.reason = w.reason;
      entry.querySelector(".bar").style.setProperty("--w", `${(w.weight * 100).toFixed(1)}%`);
      entry.querySelector(".w").textContent = pct(w.weight, 1);
      entry.querySelector(".reason").textContent = w.reason;
    });
  }

  entryHtml(zone, model, w) {
    const key = `${zone}|${model}|${w.region}`;
    const open = this.opened.has(key);
    return `<div class="entry${open ? " open" : ""}" data-region="${esc(w.region)}" data-weight="${w.weight}" ` +
      `data-reason="${esc(w.reason)}"><button type="button" class="entry-toggle" data-reason-key="${esc(key)}" ` +
      `aria-expanded="${open}"><span class="bar" style="--w:${(w.weight * 100).toFixed(1)}%"></span>` +
      `<strong>${esc(w.region)}</strong> <span class="w">${pct(w.weight, 1)}</span></button>` +
      `<div class="reason">${esc(w.reason)}</div></div>`;
  }

  drawDiffs() {
    if (!state.diffs.length) {
      setHtml(this.diffs, `<li class="muted">No change since this page connected.</li>`);
      return;
    }
    setHtml(this.diffs, state.diffs.map((d) => {
      const regions = d.regions.map((r) => `${esc(r.region)}: ${badge(r.old || "unknown")} → ` +
        `${badge(r.new || "unknown")} <span class="muted">${esc(r.reason || "")}</span>`).join("<br>");
      const lists = d.lists.slice(0, 4).map((l) => `${esc(zoneLabel(l.zone))}/${esc(l.model)} ` +
        `moved ${pct(l.moved, 1)}`).join(", ");
      return `<li><time>${esc(clock(d.at))}</time> <code>${esc(d.version)}</code> ` +
        `${esc(d.summary)}${regions ? `<div>${regions}</div>` : ""}` +
        `${lists ? `<div class="muted">${lists}${d.listsChanged > 4 ? ", …" : ""}</div>` : ""}</li>`;
    }).join(""));
  }

  drawHistory() {
    if (!state.history.length) {
      setHtml(this.history, `<li class="muted">No recorded version yet.</li>`);
      return;
    }
    setHtml(this.history, state.history.map((h) =>
      `<li><button type="button" class="link" data-version="${esc(h.version)}">${esc(h.version)}</button> ` +
      `<time>${esc(stamp(h.generated_at))}</time> <span class="muted">${esc(h.reason)}</span></li>`).join(""));
  }
}
