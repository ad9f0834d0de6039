// The routing view: the table per client zone × model (weights and reasons), the recent
// changes the control loop pushed, and the recorded history (any version can be opened).

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
    history.addEventListener("click", (ev) => {
      const button = ev.target.closest("[data-version]");
      if (button) this.open(button.dataset.version);
    });
    viewing.addEventListener("click", (ev) => {
      if (ev.target.closest("[data-live]")) {
        this.recorded = null;
        this.update(new Set(["all"]));
      }
    });
  }

  async open(version) {
    try {
      const res = await fetch(`${this.api}/routing/history/${encodeURIComponent(version)}`, {
        credentials: "same-origin", headers: { Accept: "application/json" },
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      this.recorded = await res.json();
    } catch (err) {
      setHtml(this.viewing, `<span class="error">could not load ${esc(version)}: ${esc(err.message)}</span>`);
      return;
    }
    this.update(new Set(["all"]));
  }

  update(parts) {
    const live = state.table;
    if (!live) return;
    this.version.textContent = live.version;
    this.source.textContent = live.source === "static" ? "(static: no tick yet)" : `at ${clock(live.generated_at)}`;
    const table = this.recorded ? this.recorded.table : live;
    setHtml(this.viewing, this.recorded
      ? `viewing recorded version <code>${esc(this.recorded.version)}</code> of ` +
        `${esc(stamp(this.recorded.generated_at))} <button type="button" class="small" data-live>Back to live</button>`
      : `live · version <code>${esc(live.version)}</code>`);
    if (parts.has("all") || parts.has("table") || parts.has("config")) this.drawGrid(table);
    if (parts.has("all") || parts.has("table")) {
      this.drawDiffs();
      this.drawHistory();
    }
  }

  drawGrid(table) {
    const names = models();
    const head = `<thead><tr><th scope="col">Client zone</th>${names.map((m) =>
      `<th scope="col">${esc(m)}</th>`).join("")}</tr></thead>`;
    const rows = zoneOrder(Object.keys(table.zones || {})).map((zone) => {
      const cells = names.map((model) => {
        const list = table.zones[zone][model];
        if (!list || !list.length) {
          const note = table.notes?.[zone]?.[model] || "no region";
          return `<td class="empty" data-zone="${esc(zone)}" data-model="${esc(model)}">` +
            `<span class="muted">${esc(note)}</span></td>`;
        }
        return `<td data-zone="${esc(zone)}" data-model="${esc(model)}">${list.map((w) =>
          `<div class="entry" data-region="${esc(w.region)}" data-weight="${w.weight}" title="${esc(w.reason)}">` +
          `<span class="bar" style="--w:${(w.weight * 100).toFixed(1)}%"></span>` +
          `<strong>${esc(w.region)}</strong> ${pct(w.weight, 1)}` +
          `<div class="reason">${esc(w.reason)}</div></div>`).join("")}</td>`;
      }).join("");
      return `<tr><th scope="row">${esc(zoneLabel(zone))}</th>${cells}</tr>`;
    }).join("");
    setHtml(this.grid, `${head}<tbody>${rows}</tbody>`);
    const notes = Object.entries(table.notes || {}).flatMap(([zone, byModel]) =>
      Object.entries(byModel).map(([model, note]) => `${zoneLabel(zone)}/${model}: ${note}`));
    setHtml(this.notes, notes.length ? `<details><summary>${notes.length} note` +
      `${notes.length > 1 ? "s" : ""} (empty or fail-open lists)</summary><ul>${notes.map((n) =>
        `<li>${esc(n)}</li>`).join("")}</ul></details>` : "");
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
