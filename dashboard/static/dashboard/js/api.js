// Calls to the REST API with the page's session (and its CSRF token for writes). Every answer
// comes back as { status, doc }; a network failure as status 0 with the error as detail.

export function csrfToken() {
  return document.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
}

export async function call(method, url, body = undefined) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    headers["X-CSRFToken"] = csrfToken();
  }
  let res;
  try {
    res = await fetch(url, {
      method, credentials: "same-origin", headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    return { status: 0, doc: { detail: err.message } };
  }
  let doc;
  try {
    doc = await res.json();
  } catch {
    doc = { detail: `HTTP ${res.status}` };
  }
  return { status: res.status, doc };
}

// A reader's sentence for an API error.
export function explain(status, doc) {
  if (status === 0) return `Network error: ${doc.detail}`;
  if (status === 403) return `Refused: your role may not do this. ${doc.detail || ""}`;
  if (status === 400 && doc.fields) {
    return `Invalid ${Object.keys(doc.fields).join(", ")}: ${doc.detail}`;
  }
  return `Error ${status}: ${doc.detail || "unexpected answer"}`;
}
