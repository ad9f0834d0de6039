// Formatting for the dashboard: numbers, shares, durations, times; HTML escaping.

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
}

export function pct(share, digits = 0) {
  return share === null || share === undefined || Number.isNaN(share)
    ? "—" : `${(share * 100).toFixed(digits)}%`;
}

export function num(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  return Number(value).toLocaleString("en-US", { maximumFractionDigits: digits });
}

export function ms(value) {
  return value === null || value === undefined ? "—" : `${num(value, value < 10 ? 1 : 0)} ms`;
}

export function gib(mb) {
  return mb === null || mb === undefined ? "—" : `${num(mb / 1024, 0)} GiB`;
}

export function tokens(perSecond) {
  if (perSecond === null || perSecond === undefined) return "—";
  return perSecond >= 1000 ? `${num(perSecond / 1000, 1)}k tok/s` : `${num(perSecond)} tok/s`;
}

// "3m 12s" from seconds.
export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

// Seconds since the epoch from an ISO 8601 string or a number.
export function epoch(value) {
  if (value === null || value === undefined || value === "") return null;
  if (typeof value === "number") return value;
  const t = Date.parse(value);
  return Number.isNaN(t) ? null : t / 1000;
}

export function clock(value) {
  const t = epoch(value);
  if (t === null) return "—";
  return new Date(t * 1000).toISOString().slice(11, 19);
}

export function stamp(value) {
  const t = epoch(value);
  if (t === null) return "—";
  return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z";
}
