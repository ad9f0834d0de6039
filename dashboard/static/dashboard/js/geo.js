// The map's projection: d3-geo's Natural Earth 1 formula with the scale and translate that
// dashboard/mapbuild/build_world.mjs fitted when it projected the country shapes.

const RAD = Math.PI / 180;

export function naturalEarth1Raw(lambda, phi) {
  const phi2 = phi * phi;
  const phi4 = phi2 * phi2;
  return [
    lambda * (0.8707 - 0.131979 * phi2 + phi4 * (-0.013791 + phi4 * (0.003971 * phi2 - 0.001529 * phi4))),
    phi * (1.007226 + phi2 * (0.015085 + phi4 * (-0.044475 + 0.028874 * phi2 - 0.005916 * phi4))),
  ];
}

// Returns (lon, lat) -> [x, y] in the world file's SVG coordinates.
export function projection(world) {
  const k = world.scale;
  const [tx, ty] = world.translate;
  return (lon, lat) => {
    const [x, y] = naturalEarth1Raw(lon * RAD, lat * RAD);
    return [tx + k * x, ty - k * y];
  };
}

export const CONTINENTS = new Set(["AF", "AN", "AS", "EU", "NA", "OC", "SA"]);

// A zone of clients in one country (not a continent, not "default").
export function isCountryZone(zone) {
  return zone !== "default" && !CONTINENTS.has(zone);
}

export function zoneLabel(zone) {
  return zone.startsWith("country:") ? zone.slice(8) : zone;
}
