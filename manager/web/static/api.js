// api: the HTTP API the page uses, the same routes curl uses. Writes send
// JSON (the manager refuses cookie writes that are not same-origin JSON).
export const user = document.body.dataset.user;
// sandbox: the routes all the user's agents share (files, skills).
export const sandbox = `/u/${encodeURIComponent(user)}`;
// agentName: the agent this tab talks to, from ?agent= (main by default).
const asked = new URLSearchParams(location.search).get('agent') || 'main';
export const agentName = /^[a-z][a-z0-9-]{0,31}$/.test(asked) ? asked : 'main';
// agent: that agent's own routes (conversations, approvals, rules,
// reminders, jobs); main's are the sandbox's own.
export const agentPath = (name) => (name === 'main' ? sandbox : `${sandbox}/agents/${encodeURIComponent(name)}`);
export const agent = agentPath(agentName);

export class APIError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

// readRetries are the waits before a read is sent again after the network
// failed under it (a phone moving between networks, Wi-Fi waking up): a
// read changes nothing, so sending it again is safe. A write is never sent
// twice; its caller says it failed and the owner sends it again.
const readRetries = [250, 750, 1500, 3000];
const pause = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// send is fetch, with a read tried again while the network fails (fetch
// rejects with a TypeError). An answer, even an error, is never retried
// here: the caller decides what a 503 means.
async function send(path, opts) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(path, opts);
    } catch (err) {
      if (opts.method !== 'GET' || !(err instanceof TypeError) || attempt >= readRetries.length) {
        throw new APIError(0, { detail: `could not reach the server (${err.message}); check the connection and try again` });
      }
      await pause(readRetries[attempt]);
    }
  }
}

export async function call(method, path, body) {
  const opts = { method, credentials: 'same-origin', headers: {} };
  if (body !== undefined || method !== 'GET') {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = body === undefined ? '' : JSON.stringify(body);
  }
  const resp = await send(path, opts);
  if (resp.status === 401) {
    location.assign('/app/sign-in');
    throw new APIError(401, { title: 'signed out' });
  }
  const text = await resp.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch { data = { detail: text }; }
  if (!resp.ok) throw new APIError(resp.status, data);
  return data;
}

export const get = (path) => call('GET', path);
export const post = (path, body) => call('POST', path, body);

// id checks a record id the agent sent before it goes into a URL: the
// agent's answers may be hostile ("../../api/…" would reach another route).
export function id(v) {
  if (!Number.isSafeInteger(v) || v < 1) throw new Error(`not a record id: ${String(v).slice(0, 40)}`);
  return String(v);
}
