// Unit tests of the dashboard's WebSocket wrapper (socket.js) with a fake WebSocket.
import assert from "node:assert/strict";
import { test } from "node:test";

const opened = [];
class FakeSocket {
  static OPEN = 1;
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    opened.push(this);
  }
}
globalThis.WebSocket = FakeSocket;
globalThis.location = { protocol: "http:", host: "127.0.0.1:8000" };
globalThis.window = { addEventListener() {} };
globalThis.document = { addEventListener() {}, visibilityState: "visible" };

const { LiveSocket } = await import("../../../dashboard/static/dashboard/js/socket.js");

function socket() {
  const seen = { statuses: [], messages: [], denied: [] };
  const live = new LiveSocket("/ws/dashboard/", {
    onMessage: (m) => seen.messages.push(m),
    onStatus: (s) => seen.statuses.push(s),
    onDenied: (code) => seen.denied.push(code),
  });
  return { live, seen };
}

test("it reconnects by itself with a growing delay, reset by a snapshot", (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const { live, seen } = socket();
  live.start();
  assert.equal(opened.at(-1).url, "ws://127.0.0.1:8000/ws/dashboard/");
  const before = opened.length;
  opened.at(-1).onclose({ code: 1006 });
  assert.equal(seen.statuses.at(-1), "reconnecting");
  assert.ok(live.retryIn <= 0.6);
  t.mock.timers.tick(700);
  assert.equal(opened.length, before + 1);
  opened.at(-1).onclose({ code: 1006 });
  assert.ok(live.delay >= 2000, `delay ${live.delay}`); // doubled twice
  t.mock.timers.tick(1300);
  opened.at(-1).onmessage({ data: JSON.stringify({ type: "snapshot" }) });
  assert.equal(seen.statuses.at(-1), "live");
  assert.equal(live.delay, 500);
  assert.equal(seen.messages.at(-1).type, "snapshot");
});

test("a refusal (4401) goes to the login page instead of retrying", (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const { live, seen } = socket();
  live.start();
  const count = opened.length;
  opened.at(-1).onclose({ code: 4401 });
  t.mock.timers.tick(60_000);
  assert.deepEqual(seen.denied, [4401]);
  assert.equal(opened.length, count);
});
