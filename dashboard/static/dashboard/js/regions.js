// The regions table and the selected region's card, updated in place on every tick.

import { LineChart } from "./charts.js";
import { clock, duration, esc, gib, ms, num, pct, stamp, tokens } from "./format.js";
import { badge, endpointState } from "./states.js";
import {
  drillOnEndpoint, endpointsOf, nominal, regionFigures, regionNames, regionStatus, serverNow, state,
  trafficShare,
} from "./store.js";

// Column names, repeated on each cell (data-label) for the phone layout, where rows stack.
const COLUMNS = ["Region", "State", "Since", "GPU util", "GPU mem", "Queue", "KV cache",
  "TTFT p50 / p99", "Headroom", "Capacity", "Traffic", "Endpoints", "Actions"];

function actionButton(verb, kind, target, text) {
  return `<button type="button" class="small" data-action="${verb}" data-kind="${kind}" ` +
    `data-target="${esc(target)}">${esc(text)}</button>`;
}

export function regionActions(name) {
  const row = state.regions.get(name);
  if (!row || !state.user?.can_act) return "";
  const drain = row.admin_state === "active"
    ? actionButton("drain", "region", name, "Drain…")
    : actionButton("undrain", "region", name, "Undrain…");
  return `${drain}${actionButton("weight", "region", name, "Weight…")}`;
}

const rendered = new WeakMap();

// Replace a node's content only when it changed (keeps focus and avoids layout work).
export function setHtml(node, html) {
  if (rendered.get(node) === html) return;
  rendered.set(node, html);
  node.innerHTML = html;
}

function sinceText(since) {
  return since ? duration(serverNow() - since) : "—";
}

export class RegionsTable {
  constructor(table, onSelect) {
    this.body = table.tBodies[0];
    this.rows = new Map();
    this.selected = null;
    this.body.addEventListener("click", (ev) => {
      const button = ev.target.closest("[data-select]");
      if (button) onSelect(button.dataset.select);
    });
  }

  select(name) {
    this.selected = name;
    for (const [key, tr] of this.rows) tr.classList.toggle("selected", key === name);
  }

  update() {
    const names = regionNames();
    for (const [name, tr] of this.rows) {
      if (!state.regions.has(name)) {
        tr.remove();
        this.rows.delete(name);
      }
    }
    const cols = state.user?.can_act ? 13 : 12;
    names.forEach((name) => {
      let tr = this.rows.get(name);
      if (!tr) {
        tr = document.createElement("tr");
        tr.dataset.region = name;
        for (let i = 0; i < cols; i += 1) {
          const td = tr.appendChild(document.createElement("td"));
          td.dataset.label = COLUMNS[i];
        }
        this.rows.set(name, tr);
      }
      this.body.appendChild(tr); // keeps the rows sorted
      tr.classList.toggle("selected", name === this.selected);
      const status = regionStatus(name);
      const fig = regionFigures(name);
      const c = tr.cells;
      setHtml(c[0], `<button type="button" class="link" data-select="${esc(name)}">${esc(name)}</button>`);
      setHtml(c[1], stateCell(status));
      c[1].dataset.state = status.shown;
      c[1].dataset.machine = status.state;
      if (status.drill) c[1].dataset.drill = status.drill.id;
      else delete c[1].dataset.drill;
      setHtml(c[2], `<span title="${esc(stamp(status.since))}">${sinceText(status.since)}</span>` +
        `<div class="sub stamp">${esc(stamp(status.since))}</div>`);
      setHtml(c[3], fig.util === null ? "—" : `${fig.util.toFixed(0)}%`);
      setHtml(c[4], fig.memTotal ? `${gib(fig.memUsed)}<div class="sub">of ${gib(fig.memTotal)}</div>` : "—");
      setHtml(c[5], fig.waiting === null ? "—"
        : `${num(fig.waiting)} waiting<div class="sub">${num(fig.running)} running</div>`);
      setHtml(c[6], pct(fig.kv));
      setHtml(c[7], fig.ttft50 === null ? "—" : `${ms(fig.ttft50)}<div class="sub">${ms(fig.ttft99)}</div>`);
      setHtml(c[8], pct(status.headroom));
      setHtml(c[9], `${tokens(status.capacity)}<div class="sub">of ${tokens(nominal(name))}</div>`);
      const share = trafficShare(name);
      c[10].dataset.share = share === null ? "" : share.toFixed(4);
      setHtml(c[10], `<span class="bar" style="--w:${((share ?? 0) * 100).toFixed(1)}%"></span>${pct(share)}`);
      setHtml(c[11], `${fig.healthy}/${fig.total} healthy` +
        (fig.degraded ? `<div class="sub" data-degraded="${fig.degraded}">${fig.degraded} degraded</div>` : ""));
      if (cols === 13) setHtml(c[12], regionActions(name));
    });
  }
}

// A region's state with its reason (shown under it on phones, where the card is far away);
// under a drill, "drill" and what the drill does to it, never a bare "down".
export function stateCell(status) {
  const label = status.drill ? `drill · ${status.state}` : undefined;
  return `${badge(status.shown, label)}<div class="sub reason">${esc(status.reason)}</div>`;
}

export function drillNote(drill) {
  if (!drill) return "";
  const phase = drill.progress?.phase || drill.status;
  return `<p class="drill-note" role="note"><strong>Drill ${esc(drill.id)} under way here</strong>: ` +
    `${esc(drill.kind)} on ${esc(drill.target)} (${esc(phase)}). Its fault is practice, not an ` +
    `outage. <a href="#drills-panel">Follow it in Drills</a></p>`;
}

export class RegionCard {
  constructor(root) {
    this.root = root;
    this.name = null;
    this.chart = null;
  }

  show(name) {
    this.name = name;
    this.root.innerHTML = `<div class="card-head"></div><dl class="figures"></dl>` +
      `<div class="spark-wrap"><span class="muted">GPU utilisation, recent minutes</span>` +
      `<div class="spark"></div></div><div class="card-models"></div>` +
      `<div class="scroll"><table class="grid endpoints stack"><thead><tr><th scope="col">Endpoint</th>` +
      `<th scope="col">State</th><th scope="col">GPU · KV</th><th scope="col">Queue · TTFT</th>` +
      `${state.user?.can_act ? '<th scope="col">Actions</th>' : ""}</tr></thead>` +
      `<tbody></tbody></table></div><div class="card-actions"></div>`;
    this.chart = new LineChart(this.root.querySelector(".spark"), {
      compact: true, label: `GPU utilisation of ${name} over the last ten minutes`,
    });
    this.update();
  }

  update() {
    const name = this.name;
    if (!name) return;
    const row = state.regions.get(name);
    if (!row) {
      this.root.innerHTML = `<p class="muted">Region ${esc(name)} no longer exists.</p>`;
      this.name = null;
      return;
    }
    const status = regionStatus(name);
    const fig = regionFigures(name);
    const q = (sel) => this.root.querySelector(sel);
    const shownLabel = status.drill ? `drill · ${status.state}` : undefined;
    setHtml(q(".card-head"), `<h3>${esc(name)} ${badge(status.shown, shownLabel)}</h3>` +
      drillNote(status.drill) +
      `<p>${esc(row.country)} · since ${esc(clock(status.since))} (for ${sinceText(status.since)})` +
      `${status.paused ? " · <strong>failover paused</strong>" : ""}</p>` +
      `<p class="muted reason">${esc(status.reason)}</p>`);
    const items = [
      ["Admin state", esc(row.admin_state)], ["Weight", num(row.weight, 2)],
      ["Priority", num(row.priority)], ["Traffic", pct(trafficShare(name))],
      ["Headroom", pct(status.headroom)],
      ["Capacity", `${tokens(status.capacity)} of ${tokens(nominal(name))}`],
      ["Slow start", status.state === "recovering" ? pct(status.ramp) : "—"],
      ["GPU util", fig.util === null ? "—" : `${fig.util.toFixed(0)}%`],
      ["GPU memory", fig.memTotal ? `${gib(fig.memUsed)} / ${gib(fig.memTotal)}` : "—"],
      ["Queue", fig.waiting === null ? "—" : `${num(fig.waiting)} waiting, ${num(fig.running)} running`],
      ["KV cache", pct(fig.kv)],
      ["TTFT p50 / p99", fig.ttft50 === null ? "—" : `${ms(fig.ttft50)} / ${ms(fig.ttft99)}`],
      ["Throughput", tokens(fig.tokens)],
    ];
    setHtml(q(".figures"), items.map(([k, v]) => `<div><dt>${k}</dt><dd>${v}</dd></div>`).join(""));
    const perModel = state.table?.regions?.[name]?.models || {};
    const served = new Set(endpointsOf(name).flatMap((e) => e.models));
    setHtml(q(".card-models"), `<strong>Models</strong> ` + [...served].sort().map((m) =>
      `<span class="chip">${esc(m)} <span class="muted">${tokens(perModel[m] ?? null)}</span></span>`).join(" "));
    this.updateEndpoints(q(".endpoints tbody"));
    setHtml(q(".card-actions"), regionActions(name));
    this.chart.update([{ key: name, label: name, index: 0, points: state.util.get(name) || [] }], serverNow());
  }

  updateEndpoints(body) {
    const html = endpointsOf(this.name).map((e) => {
      const live = state.live.endpoints?.[e.name];
      const st = endpointState(e, live);
      const drill = drillOnEndpoint(e.name);
      const shown = drill && st.state !== "drained" ? { state: "drill", label: `drill · ${st.label}` } : st;
      const acts = state.user?.can_act
        ? `<td data-label="Actions">${e.admin_state === "active"
          ? actionButton("drain", "endpoint", e.name, "Drain…")
          : actionButton("undrain", "endpoint", e.name, "Undrain…")}</td>` : "";
      const util = live?.gpu_util_pct === null || live?.gpu_util_pct === undefined
        ? "—" : `${live.gpu_util_pct.toFixed(0)}%`;
      const mem = live?.mem_total_mb ? `${gib(live.mem_used_mb)} / ${gib(live.mem_total_mb)}` : "";
      const queue = live?.waiting === undefined ? "—" : `${num(live.waiting)} waiting`;
      const ttft = live?.ttft_p50_ms === undefined ? "" : `${ms(live.ttft_p50_ms)} / ${ms(live.ttft_p99_ms)}`;
      return `<tr data-endpoint="${esc(e.name)}"><th scope="row">` +
        `${esc(e.name)}<div class="sub">${esc(e.gpu)} × ${e.gpus} · ${esc(e.models.join(", "))}</div></th>` +
        `<td data-label="State" data-state="${shown.state}">${badge(shown.state, shown.label)}` +
        `${live?.reason ? `<div class="sub why">${esc(live.reason)}</div>` : ""}</td>` +
        `<td data-label="GPU · KV">${util} · KV ${pct(live?.kv_cache_usage)}<div class="sub">${mem}</div></td>` +
        `<td data-label="Queue · TTFT">${queue}<div class="sub">${ttft}</div></td>${acts}</tr>`;
    }).join("");
    setHtml(body, html);
  }
}
