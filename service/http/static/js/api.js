// API v1 over fetch, with the token from localStorage in the Authorization header.
// Every call rejects with an ApiError carrying the HTTP status and the API's message.

const TOKEN_KEY = "shunter.token";

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export const token = {
  get: () => localStorage.getItem(TOKEN_KEY),
  set: (t) => localStorage.setItem(TOKEN_KEY, t),
  clear: () => localStorage.removeItem(TOKEN_KEY),
};

function headers(extra = {}) {
  const h = { Accept: "application/json", ...extra };
  const t = token.get();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

function messageOf(body, fallback) {
  if (body && typeof body === "object") {
    if (typeof body.message === "string" && body.message) return body.message;
    if (typeof body.detail === "string") return body.detail;
    if (Array.isArray(body.detail) && body.detail.length) {
      return body.detail.map((d) => (d.loc ? `${d.loc}: ${d.msg}` : d.msg)).join("\n");
    }
  }
  return fallback;
}

async function raiseFor(resp) {
  if (resp.ok) return;
  let body = null;
  try { body = await resp.json(); } catch { /* not JSON */ }
  throw new ApiError(resp.status, messageOf(body, `HTTP ${resp.status}`), body);
}

export async function api(method, path, { params, body, signal } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const init = { method, headers: headers(), signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(url, init);
  await raiseFor(resp);
  const type = resp.headers.get("content-type") || "";
  if (resp.status === 204) return null;
  return type.includes("application/json") ? resp.json() : resp.text();
}

export const get = (path, params, signal) => api("GET", path, { params, signal });
export const post = (path, body) => api("POST", path, { body });

// Every item of a cursor-paginated list ({data, next_cursor}); `max` caps the total fetched.
export async function all(path, params = {}, { max = 100000, signal } = {}) {
  const items = [];
  let cursor = null;
  do {
    const page = await get(path, { ...params, cursor }, signal);
    if (Array.isArray(page)) return page; // an endpoint that is not paginated
    items.push(...page.data);
    cursor = page.next_cursor;
  } while (cursor && items.length < max);
  return items;
}

// Server-Sent Events read with fetch() so the token travels in the Authorization header,
// never in a URL (EventSource cannot send headers). Calls onEvent({event, data}) per message;
// resolves when the server ends the stream, rejects on HTTP errors; abort with `signal`.
export async function stream(path, onEvent, signal) {
  const resp = await fetch(new URL(path, window.location.origin), {
    headers: headers({ Accept: "text/event-stream" }),
    signal,
    cache: "no-store",
  });
  await raiseFor(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const msg = parseBlock(block);
      if (msg) onEvent(msg);
    }
  }
}

function parseBlock(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue; // comment / keep-alive
    const i = line.indexOf(":");
    const field = i < 0 ? line : line.slice(0, i);
    const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    if (field === "event") event = val;
    else if (field === "data") data.push(val);
  }
  if (!data.length && event === "message") return null;
  const text = data.join("\n");
  let parsed = text;
  try { parsed = text ? JSON.parse(text) : null; } catch { /* plain text data */ }
  return { event, data: parsed };
}
