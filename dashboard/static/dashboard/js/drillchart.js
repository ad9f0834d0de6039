// A drill report's timeline as SVG, from the report alone (regions/drills/plot.py draws the
// same as a PNG): top, the target region's share of the traffic in each published table with
// its down / recovering spells shaded (scaled to its largest share); below, what DNS answered
// each vantage point the region served, one bar per vantage coloured by the regions named (the
// others, usually most, are only counted); lines mark injection, fault, detection, restore and
// recovery. Times are seconds after the fault.

import { esc } from "./format.js";

const MARKS = [
  ["injected", "injected", "#777777", "2 3"],
  ["fault", "fault", "#D55E00", ""],
  ["detected", "detected", "#E69F00", "6 3"],
  ["restored", "restored", "#0072B2", "8 3 2 3"],
  ["recovered", "recovered", "#009E73", "6 3"],
];
const SHADES = { down: "#f6d0c2", recovering: "#cfe3f2", degraded: "#fbe8bf" };
const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442", "#999999"];
const W = 960, LEFT = 100, RIGHT = 12, TOP = 44, SHARE_H = 80, ROW_H = 18, GAP = 26;
const CHAR_W = 6.5; // a label's width per character at the chart's 11 px

// [[t, value], ...] changes → [[start, end, value], ...] spells up to ``end``.
export function spells(points, end) {
  return (points || []).map(([at, value], i) => [Number(at), Number(i + 1 < points.length ? points[i + 1][0] : end), value]);
}

// Colours per answer label: regions in order of appearance; "-" none, "!..." an error.
export function colours(dns) {
  const out = new Map([["-", "#dddddd"]]);
  for (const points of Object.values(dns || {})) {
    for (const [, label] of points) {
      if (label.startsWith("!") || out.has(label)) continue;
      out.set(label, PALETTE[(out.size - 1) % PALETTE.length]);
    }
  }
  return out;
}

// The vantage points answered with ``region`` at some point (all of them if none was).
export function servedVantages(dns, region) {
  const all = Object.keys(dns || {});
  const served = all.filter((n) => dns[n].some(([, label]) => label.split(",").includes(region)));
  return served.length ? served : all;
}

export function timelineSvg(report) {
  const tl = report.timeline || {};
  const marks = tl.marks || {};
  const region = report.region || report.target;
  const dns = Object.fromEntries(servedVantages(tl.dns, region).map((n) => [n, tl.dns[n]]));
  const names = Object.keys(dns);
  const others = Object.keys(tl.dns || {}).length - names.length;
  const end = Number(marks.end ?? 1);
  const start = Math.min(Number(marks.injected ?? 0), 0) - 2;
  const x = (t) => LEFT + (W - LEFT - RIGHT) * ((t - start) / Math.max(1, end + 0.5 - start));
  const rowsTop = TOP + SHARE_H + GAP;
  const h = rowsTop + Math.max(1, names.length) * ROW_H + 34;
  const share = tl.share || [];
  const top = Math.min(1, Math.max(0.05, ...share.map(([, [v]]) => v * 1.15)));
  const shareY = (v) => TOP + SHARE_H * (1 - Math.max(0, Math.min(1, v / top)));
  const parts = [];
  for (const [a, b, [, st]] of spells(share, end)) {
    if (SHADES[st]) parts.push(`<rect x="${x(a).toFixed(1)}" y="${TOP}" width="${Math.max(0.5, x(b) - x(a)).toFixed(1)}" height="${SHARE_H}" fill="${SHADES[st]}"><title>${esc(st)}</title></rect>`);
  }
  parts.push(`<line x1="${LEFT}" x2="${W - RIGHT}" y1="${shareY(0)}" y2="${shareY(0)}" class="axis"/>`);
  if (share.length) {
    const path = spells(share, end).map(([a, b, [v]], i) =>
      `${i ? "L" : "M"}${x(a).toFixed(1)},${shareY(v).toFixed(1)}H${x(b).toFixed(1)}`).join("");
    parts.push(`<path d="${path}" class="share-line"/>`);
  }
  parts.push(`<text x="${LEFT - 6}" y="${TOP + 10}" text-anchor="end">${esc(region)} share</text>`,
    `<text x="${LEFT - 6}" y="${TOP + 24}" text-anchor="end">0–${Math.round(top * 100)}%</text>`);
  const fill = colours(dns);
  names.forEach((name, row) => {
    const y = rowsTop + row * ROW_H;
    parts.push(`<text x="${LEFT - 6}" y="${y + 12}" text-anchor="end">${esc(name)}</text>`);
    for (const [a, b, label] of spells(dns[name], end)) {
      const colour = label.startsWith("!") ? "#222222" : fill.get(label);
      parts.push(`<rect x="${x(a).toFixed(1)}" y="${y + 3}" width="${Math.max(0.5, x(b) - x(a)).toFixed(1)}" ` +
        `height="${ROW_H - 6}" fill="${colour}" data-vantage="${esc(name)}"><title>${esc(name)}: ${esc(label)}</title></rect>`);
    }
  });
  const rowEnds = []; // where the last label of each line of labels ends
  for (const [key, text, colour, dash] of MARKS) {
    if (marks[key] === null || marks[key] === undefined) continue;
    const mx = x(Number(marks[key]));
    const half = (text.length * CHAR_W) / 2 + 3;
    let row = rowEnds.findIndex((end) => end < mx - half); // the first line it fits on
    if (row < 0) row = Math.min(rowEnds.length, 2); // three lines at most, over the chart
    rowEnds[row] = mx + half;
    const ty = TOP - 6 - row * 13;
    const tx = Math.min(W - RIGHT - half, Math.max(half, mx)); // labels stay inside the chart
    parts.push(`<line x1="${mx.toFixed(1)}" x2="${mx.toFixed(1)}" y1="${ty + 3}" y2="${h - 28}" stroke="${colour}" ` +
      `stroke-dasharray="${dash}" data-mark="${key}"/>`,
      `<text x="${tx.toFixed(1)}" y="${ty}" text-anchor="middle" fill="${colour}">${text}</text>`);
  }
  for (let t = Math.ceil(start / 10) * 10; t <= end; t += 10) {
    parts.push(`<text x="${x(t).toFixed(1)}" y="${h - 14}" text-anchor="middle">${t} s</text>`);
  }
  const legend = [...fill].map(([label, colour]) =>
    `<span class="legend-item"><span class="swatch" style="background:${colour}"></span>${esc(label === "-" ? "no answer" : label)}</span>`).join("");
  return `<svg class="drill-timeline" viewBox="0 0 ${W} ${h}" role="img" aria-label="Timeline of drill ` +
    `${esc(report.kind)} on ${esc(report.target)}: the region's share of traffic, and what DNS answered ` +
    `each vantage point, in seconds after the fault">${parts.join("")}</svg>` +
    `<div class="legend">${legend}<span class="legend-item"><span class="swatch" style="background:#222"></span>error</span>` +
    `${others ? `<span class="legend-item muted">${others} other vantage points, never answered with ${esc(region)}, not drawn</span>` : ""}</div>`;
}
