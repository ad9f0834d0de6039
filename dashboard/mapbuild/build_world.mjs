// Build the dashboard's world map: Natural Earth 1:110m countries (world-atlas) projected
// with d3-geo's Natural Earth projection into SVG path strings keyed by ISO 3166-1 alpha-2.
// The browser then needs no map library: dashboard/static/dashboard/js/geo.js applies the
// same projection (raw formula + the scale and translate written here) to place markers.
//
//   cd dashboard/mapbuild && npm ci && npm run build
import { readFileSync, writeFileSync, mkdirSync, copyFileSync } from "node:fs";
import { createRequire } from "node:module";
import { geoGraticule10, geoNaturalEarth1, geoPath } from "d3-geo";
import { feature } from "topojson-client";
import countries from "i18n-iso-countries";

const require = createRequire(import.meta.url);
const out = new URL("../static/dashboard/vendor/", import.meta.url);
const WIDTH = 960;
const HEIGHT = 500;
// Countries world-atlas ships without an ISO numeric id.
const BY_NAME = { Kosovo: "XK", Somaliland: "SO", "N. Cyprus": "CY" };

const topo = JSON.parse(readFileSync(require.resolve("world-atlas/countries-110m.json")));
const land = feature(topo, topo.objects.countries);
const sphere = { type: "Sphere" };
const projection = geoNaturalEarth1().fitExtent([[4, 4], [WIDTH - 4, HEIGHT - 4]], sphere);
const path = geoPath(projection).digits(1);

const shapes = land.features.map((f) => {
  const id = (f.id && countries.numericToAlpha2(f.id)) || BY_NAME[f.properties.name] || "";
  return { id, name: f.properties.name, d: path(f) };
}).filter((s) => s.d);
shapes.sort((a, b) => a.name.localeCompare(b.name));

const doc = {
  source: "Natural Earth 1:110m countries via world-atlas 2.0.2 (ISC); projected with d3-geo 3.1.2",
  width: WIDTH,
  height: HEIGHT,
  projection: "naturalEarth1",
  scale: projection.scale(),
  translate: projection.translate(),
  sphere: path(sphere),
  graticule: path(geoGraticule10()),
  countries: shapes,
};
mkdirSync(out, { recursive: true });
writeFileSync(new URL("world-110m.json", out), JSON.stringify(doc));
mkdirSync(new URL("LICENSES/", out), { recursive: true });
for (const pkg of ["world-atlas", "d3-geo", "topojson-client", "i18n-iso-countries"]) {
  const license = new URL(`node_modules/${pkg}/LICENSE`, import.meta.url);
  copyFileSync(license, new URL(`LICENSES/${pkg}.LICENSE`, out));
}
console.log(`wrote ${shapes.length} countries, scale ${doc.scale.toFixed(3)}`);
