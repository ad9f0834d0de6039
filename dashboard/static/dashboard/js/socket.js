// The dashboard's WebSocket: connects, hands every message to onMessage, and reconnects
// by itself with exponential backoff and jitter. Close codes 4401/4403 (not signed in /
// no role) send the browser to the login page instead.

const MIN_DELAY_MS = 500;
const MAX_DELAY_MS = 15000;

export class LiveSocket {
  constructor(path, { onMessage, onStatus, onDenied }) {
    this.url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
    this.onMessage = onMessage;
    this.onStatus = onStatus;
    this.onDenied = onDenied;
    this.delay = MIN_DELAY_MS;
    this.ws = null;
    this.timer = null;
    this.retryAt = null;
    this.messages = 0;
  }

  start() {
    this.open();
    window.addEventListener("online", () => this.retryNow());
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible" && !this.ws) this.retryNow();
    });
  }

  open() {
    clearTimeout(this.timer);
    this.timer = null;
    this.retryAt = null;
    this.onStatus("connecting");
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch {
      this.schedule();
      return;
    }
    this.ws = ws;
    ws.onmessage = (ev) => {
      let msg;
      try {
        msg = JSON.parse(ev.data);
      } catch {
        return;
      }
      this.messages += 1;
      if (msg.type === "snapshot") {
        this.delay = MIN_DELAY_MS; // a full snapshot means the connection works
        this.onStatus("live");
      }
      this.onMessage(msg);
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (ev.code === 4401 || ev.code === 4403) {
        this.onStatus("denied");
        this.onDenied(ev.code);
        return;
      }
      this.schedule();
    };
    ws.onerror = () => {}; // onclose follows
  }

  schedule() {
    const jitter = 0.8 + Math.random() * 0.4;
    const wait = Math.round(this.delay * jitter);
    this.delay = Math.min(MAX_DELAY_MS, this.delay * 2);
    this.retryAt = Date.now() + wait;
    this.onStatus("reconnecting");
    this.timer = setTimeout(() => this.open(), wait);
  }

  retryNow() {
    if (this.ws) return;
    this.open();
  }

  get connected() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  // Seconds until the next attempt, for the banner.
  get retryIn() {
    return this.retryAt === null ? null : Math.max(0, (this.retryAt - Date.now()) / 1000);
  }
}
