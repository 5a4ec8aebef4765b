// agents: the user's agents (main, the worker, and the owner's own): list,
// create, rename, instructions (its job), model, whom each may message,
// when its conversations are summarized, its work notes and whether it gets
// the notes about the owner, delete; the notes about the owner; today's
// spend across them.
import { sandbox, agentName, call, get, post } from './api.js';
import { el, say } from './render.js';

const $ = (id) => document.getElementById(id);
const usd = (micros) => (typeof micros === 'number' ? `$${(micros / 1e6).toFixed(4)}` : '—');

const notesPath = (name) => `${sandbox}/agents/${encodeURIComponent(name)}/notes`;

// notesState says which version of a set of notes is shown, and who wrote it.
function notesState(n) {
  if (!n || !n.version) return 'No notes yet.';
  const when = n.updated_at ? new Date(n.updated_at).toLocaleString([], { dateStyle: 'short', timeStyle: 'short' }) : '';
  return `Version ${n.version}, written by ${n.updated_by === 'owner' ? 'you' : `agent ${n.updated_by}`}${when ? ` on ${when}` : ''}; ${new TextEncoder().encode(n.text).length} of 16384 bytes.`;
}

function showOwnerNotes(n) {
  $('owner-notes').value = n.text || '';
  $('owner-notes').dataset.version = String(n.version || 0);
  $('owner-notes-state').textContent = notesState(n);
}

export async function showAgents() {
  const [{ agents }, models, spend, owner] = await Promise.all([
    get(`${sandbox}/agents`), get(`${sandbox}/models`).catch(() => ({ models: [] })), get('/api/spend').catch(() => null),
    get(`${sandbox}/notes`).catch((err) => ({ error: err.message }))]);
  // The agents are listed even when the notes cannot be read: the notes say why.
  $('owner-notes-error').textContent = owner.error ? `The notes could not be read: ${owner.error}` : '';
  if (!owner.error) showOwnerNotes(owner);
  // The worker keeps no notes.
  const work = Object.fromEntries(await Promise.all((agents || []).filter((a) => a.kind !== 'worker')
    .map((a) => get(notesPath(a.name)).then((n) => [a.name, n.work], () => [a.name, null]))));
  const today = spend ? Object.values(spend.today_micros || {}).reduce((a, b) => a + b, 0) : null;
  $('agents-spend').textContent = spend
    ? `Spent today across all agents: ${usd(today)} of ${usd(spend.daily_limit_micros)}; this month ${usd(Object.values(spend.month_micros || {}).reduce((a, b) => a + b, 0))}.`
    : 'Spend is not metered on this stack.';
  const names = (agents || []).map((a) => a.name);
  $('agent-model').replaceChildren(el('option', { value: '', text: 'the sandbox default' }), ...(models.models || []).map((m) => el('option', { value: m, text: m })));
  $('agent-list').replaceChildren(...(agents || []).map((a) => agentCard(a, models.models || [], names, work[a.name])));
}

function agentCard(a, models, names, work) {
  const builtin = a.id === 'main' || a.id === 'worker'; // they keep their names and stay
  const id = (f) => `agent-${a.id}-${f}`;
  const name = el('input', { id: id('name'), value: a.name, disabled: builtin, 'aria-label': `name of agent ${a.name}` });
  const model = el('select', { id: id('model'), 'aria-label': `model of agent ${a.name}` },
    el('option', { value: '', text: 'the sandbox default' }), ...models.map((m) => el('option', { value: m, text: m, selected: m === a.model })));
  const may = el('input', { id: id('may'), value: (a.may_message || []).join(', '), placeholder: names.filter((n) => n !== a.name).join(', '), 'aria-label': `agents ${a.name} may message` });
  const compact = el('input', { id: id('compact'), type: 'number', min: '500', max: '1000000', value: a.compact_tokens ? String(a.compact_tokens) : '', placeholder: 'sandbox default', 'aria-label': `summary threshold of agent ${a.name}, in tokens` });
  const job = el('textarea', { id: id('instructions'), rows: 3, maxLength: 8192, value: a.instructions || '', placeholder: 'its job, in your words: sent with every request it makes', 'aria-label': `instructions of agent ${a.name}` });
  const worker = a.kind === 'worker';
  const ownerNotes = el('input', { id: id('owner-notes'), type: 'checkbox', checked: a.owner_notes !== false && !worker, disabled: worker, 'aria-label': `agent ${a.name} gets the notes about you` });
  const notes = worker ? null : el('textarea', { id: id('notes'), rows: 3, maxLength: 16384, value: (work && work.text) || '', placeholder: 'its work notes: what it keeps for itself across conversations', 'aria-label': `work notes of agent ${a.name}` });
  const error = el('p', { class: 'error', role: 'alert' });
  const save = el('button', { type: 'submit', class: 'quiet', text: 'Save' });
  const form = el('form', { class: 'agent-form' },
    el('label', {}, 'Name ', name), el('label', {}, 'Model ', model),
    el('label', {}, 'May message ', may), el('label', {}, 'Summarize past (tokens) ', compact),
    el('label', { class: 'check' }, ownerNotes, worker ? 'Notes about you (never: the worker holds none of your data)' : 'Notes about you'),
    el('label', { class: 'wide-field' }, 'Instructions ', job),
    notes && el('label', { class: 'wide-field' }, 'Work notes ', notes, el('span', { class: 'small', text: notesState(work) })), save);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const patch = { instructions: job.value, model: model.value, may_message: may.value.split(',').map((s) => s.trim()).filter(Boolean), compact_tokens: compact.value ? Number(compact.value) : 0 };
    if (!worker) patch.owner_notes = ownerNotes.checked;
    if (!builtin && name.value.trim() !== a.name) patch.name = name.value.trim();
    const saved = patch.name || a.name;
    call('PATCH', `${sandbox}/agents/${encodeURIComponent(a.name)}`, patch).then(() => {
      // Written from the version shown: a note the agent wrote meanwhile is not undone (409).
      if (notes && notes.value !== ((work && work.text) || '')) return call('PUT', notesPath(saved), { text: notes.value, version: (work && work.version) || 0 });
      return null;
    }).then(() => {
      error.textContent = '';
      say(`agent ${saved} saved`);
      return showAgents();
    }).catch((err) => { error.textContent = err.status === 409 ? `${err.message}: reload the page to see them` : err.message; });
  });
  const open = el('a', { href: `?agent=${encodeURIComponent(a.name)}#/chat`, text: a.name === agentName ? 'open (this tab)' : 'open' });
  const card = el('li', { 'data-agent': a.name },
    el('div', { class: 'agent-head' }, el('strong', { text: a.name }), el('span', { class: 'label', text: `${a.kind || 'agent'} · made ${a.created_at ? new Date(a.created_at).toLocaleDateString() : '—'}` }), open),
    form, error);
  if (!builtin) {
    // Two steps, no dialog: the first press asks, the second deletes.
    const del = el('button', { type: 'button', class: 'quiet', text: 'Delete', 'data-action': 'delete' });
    del.addEventListener('click', () => {
      if (!del.dataset.armed) { del.dataset.armed = '1'; del.textContent = `Delete ${a.name} and its conversations?`; return; }
      call('DELETE', `${sandbox}/agents/${encodeURIComponent(a.name)}`).then(() => { say(`agent ${a.name} deleted`); return showAgents(); }).catch((err) => { error.textContent = err.message; });
    });
    card.append(del);
  }
  return card;
}

$('agent-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const spec = { name: $('agent-name').value.trim() };
  if ($('agent-model').value) spec.model = $('agent-model').value;
  post(`${sandbox}/agents`, spec).then(() => {
    $('agent-name').value = '';
    $('agent-error').textContent = '';
    say(`agent ${spec.name} made`);
    return showAgents();
  }).catch((err) => { $('agent-error').textContent = err.message; });
});

$('owner-notes-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  call('PUT', `${sandbox}/notes`, { text: $('owner-notes').value, version: Number($('owner-notes').dataset.version || 0) }).then((n) => {
    showOwnerNotes(n);
    $('owner-notes-error').textContent = '';
    say('notes about you saved');
  }).catch((err) => {
    // An agent wrote them since they were shown: say so, keep the owner's text.
    $('owner-notes-error').textContent = err.status === 409 ? `${err.message}: an agent wrote them meanwhile; copy your text, reload the page and save again` : err.message;
  });
});
