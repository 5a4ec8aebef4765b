// connectors: the owner's remote MCP servers for this tab's agent, kept by
// the manager (/api/connectors). Every tool starts off; a mode set here pins
// the tool's definition as shown, and a tool the server changes is off again
// until it is set again. A secret is sent once and never shown back.
import { agentName, call, get, post, id } from './api.js';
import { el, say } from './render.js';

const $ = (name) => document.getElementById(name);
const problem = (text) => { $('connector-error').textContent = text; };

export async function showConnectors() {
  const { connectors } = await get(`/api/connectors?agent=${encodeURIComponent(agentName)}`);
  $('connector-agent').textContent = agentName;
  $('connector-list').replaceChildren(...connectors.map(card));
  if (!connectors.length) $('connector-list').replaceChildren(el('li', { class: 'muted', text: 'No connectors: this agent has no remote tools.' }));
}

function card(c) {
  const cid = id(c.id);
  const refresh = el('button', { type: 'button', class: 'quiet', text: 'Check the server' });
  refresh.addEventListener('click', () => post(`/api/connectors/${cid}/refresh`).then(() => { say(`${c.name}: listed`); showConnectors(); })
    .catch((err) => problem(`${c.name}: ${err.message}`)));
  const remove = el('button', { type: 'button', class: 'quiet', text: 'Remove' });
  remove.addEventListener('click', () => call('DELETE', `/api/connectors/${cid}`).then(() => { say(`${c.name} removed`); showConnectors(); })
    .catch((err) => problem(err.message)));
  const secret = c.has_secret ? `a secret is set (header ${c.header_name})` : 'no secret';
  const tools = el('ul', { class: 'connector-tools' }, ...(c.tools || []).map((t) => tool(c, cid, t)));
  return el('li', { class: 'connector', 'data-connector': c.id },
    el('div', { class: 'connector-head' }, el('strong', { text: c.name }), el('span', { class: 'muted', text: ` ${c.url} · ${secret}` })),
    tools, el('div', { class: 'inline' }, refresh, remove));
}

function tool(c, cid, t) {
  const mode = el('select', { 'aria-label': `mode of ${t.name}`, disabled: !t.usable || t.gone },
    ...['off', 'ask', 'allow'].map((m) => el('option', { value: m, text: m })));
  mode.value = t.mode;
  mode.addEventListener('change', () => call('PUT', `/api/connectors/${cid}/tools/${encodeURIComponent(t.name)}`, { mode: mode.value })
    .then(() => { say(`${c.name}/${t.name}: ${mode.value}`); showConnectors(); })
    .catch((err) => { problem(err.message); showConnectors(); }));
  const notes = [];
  if (t.changed) notes.push(el('p', { class: 'error', text: 'Changed on the server since you set it: off until you set it again (read the new description first).' }));
  if (t.gone) notes.push(el('p', { class: 'muted', text: 'The server no longer lists this tool.' }));
  if (!t.usable) notes.push(el('p', { class: 'muted', text: 'Its name cannot be offered to a model: it stays off.' }));
  const schema = el('details', {}, el('summary', { text: 'input schema' }), el('pre', { text: JSON.stringify(t.input_schema, null, 2) }));
  return el('li', { 'data-tool': t.name },
    el('div', { class: 'inline' }, el('code', { text: t.name }), mode),
    el('p', { class: 'tool-description', text: t.description || '(no description)' }), ...notes, schema);
}

$('connector-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  problem('');
  const body = { agent: agentName, name: $('connector-name').value.trim(), url: $('connector-url').value.trim() };
  const header = $('connector-header').value.trim();
  const secret = $('connector-secret').value;
  if (header || secret) Object.assign(body, { header_name: header, secret });
  say('connecting…');
  post('/api/connectors', body).then((c) => {
    for (const f of ['connector-name', 'connector-url', 'connector-header', 'connector-secret']) $(f).value = '';
    say(`${c.name} added: ${(c.tools || []).length} tools, all off`);
    showConnectors();
  }).catch((err) => { say(''); problem(err.message); });
});
