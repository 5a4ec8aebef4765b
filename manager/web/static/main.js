// main: the signed-in client. Three pages (conversation, trace,
// approvals) over the agent's API; everything shown is read from the store
// and the stream only brings what is new.
import { agent, agentName, sandbox, get, post, id as rid } from './api.js';
import { Stream } from './stream.js';
import { Timeline, el, describeRule } from './render.js';
import { showFiles, showSkills, showReminders, showActivity, showSettings } from './pages.js';

const $ = (id) => document.getElementById(id);
const state = { conversation: 0, pending: new Map() };

function banner(text) {
  $('banner').textContent = text;
  $('banner').hidden = !text;
}

async function refreshPending() {
  const { approvals } = await get(`${agent}/approvals`);
  state.pending = new Map(approvals.map((a) => [a.id, a]));
  const n = approvals.length;
  $('pending-count').textContent = String(n);
  $('pending-count').hidden = n === 0;
  const elsewhere = approvals.filter((a) => a.conversation_id !== state.conversation).length;
  $('more-waiting').textContent = elsewhere ? `${elsewhere} more waiting in other conversations (see Approvals)` : '';
  $('more-waiting').hidden = elsewhere === 0;
  renderApprovalsPage(approvals);
  timeline.pendingChanged();
}

async function decide(id, decision, note) {
  const body = { decision, wait: false };
  if (note) body.note = note;
  await post(`${agent}/approvals/${rid(id)}`, body);
  await refreshPending();
}

const timeline = new Timeline($('timeline'), { decide, pending: () => state.pending });

const stream = new Stream({
  onEntry: (e) => {
    if (e.conversation_id !== state.conversation) return;
    timeline.add(e);
    if (e.kind === 'approval' || e.kind === 'approval_decision') refreshPending().catch(() => {});
    if (e.kind === 'citation') showCitations(e.run_id);
  },
  onDelta: (d) => timeline.delta(d),
  onState: (s) => {
    $('stream-state').dataset.state = s;
    $('stream-state').textContent = s === 'live' ? 'live' : s === 'reconnecting' ? 'reconnecting…' : 'connecting…';
    if (s === 'live') banner('');
  },
});

// loadConversation renders the current conversation from the store, then
// follows the stream from the last entry it rendered.
async function loadConversation() {
  const [sessions, inspection] = await Promise.all([get(`${agent}/sessions`), get(`${agent}/inspect?limit=1000`)]);
  state.conversation = inspection.conversation.id;
  const list = $('conversation-list');
  list.replaceChildren(...(sessions.conversations || []).map((c) => {
    const b = el('button', { type: 'button', text: c.title || `conversation ${Number(c.id)}` });
    if (c.id === state.conversation) b.setAttribute('aria-current', 'true');
    b.addEventListener('click', () => switchTo(c.id));
    return el('li', {}, b);
  }));
  await refreshPending();
  timeline.clear();
  shownCitations.clear();
  let last = 0;
  const cited = new Set();
  for (const e of inspection.entries.items || []) {
    timeline.add(e);
    last = Math.max(last, e.id);
    if (e.kind === 'citation') cited.add(e.run_id);
  }
  for (const run of cited) showCitations(run);
  stream.open(state.conversation, last);
}

// showCitations puts a run's citations under its reply, each re-checked
// against the stored text on this read, and each opening its lines.
const shownCitations = new Set();
async function showCitations(run) {
  if (shownCitations.has(run)) return;
  shownCitations.add(run);
  const rep = await get(`${agent}/corpus/citations?runId=${rid(run)}`).catch(() => null);
  if (!rep || rep.status === 'running') { shownCitations.delete(run); return; }
  const answer = [...document.querySelectorAll('#timeline > li.assistant')].filter((li) => li.dataset.run === String(run)).pop();
  if (!answer) return;
  const box = el('details', { class: 'citations', open: true }, el('summary', { text: `citations: ${rep.status.replace('_', ' ')}` }));
  for (const c of rep.citations || []) {
    const lines = el('pre', { hidden: true });
    const open = el('button', { type: 'button', class: 'link', text: 'open the lines' });
    open.addEventListener('click', async () => {
      const text = await (await fetch(`${sandbox}/raw?doc=${encodeURIComponent(c.doc)}&version=${rid(c.version)}`, { credentials: 'same-origin' })).text();
      lines.textContent = text.split('\n').slice(c.line_start - 1, c.line_end).join('\n');
      lines.hidden = false;
    });
    box.append(el('div', {}, el('span', { class: c.verified ? 'good' : 'bad', text: c.verified ? 'verified ' : `failed (${c.problem}) ` }),
      el('span', { text: `[${c.id}] ${c.doc} v${c.version} lines ${c.line_start}–${c.line_end}: “${c.quote}” ` }), open, lines));
  }
  answer.append(box);
}

async function switchTo(id) {
  await post(`${agent}/session/switch`, { id: Number(rid(id)) });
  await loadConversation();
}

async function loadModels() {
  const { models, default: def } = await get(`${agent}/models`);
  $('model').replaceChildren(...models.map((m) => el('option', { value: m, text: m, selected: m === def })));
}

function sendPrompt() {
  const text = $('prompt').value.trim();
  if (!text) return;
  $('prompt').value = '';
  // The request id makes a resend after a failure the same prompt, once.
  if (text !== state.unsentText) state.requestId = crypto.randomUUID();
  const body = { text, model: $('model').value, wait: false, requestId: state.requestId, conversation: state.conversation };
  if ($('cite').checked) body.citations = 'required';
  post(`${agent}/prompt`, body).then(() => { state.unsentText = null; }).catch((err) => {
    banner(`not sent: ${err.message}`);
    state.unsentText = text;
    $('prompt').value = text;
  });
}

// The trace: every entry, newest first, a page at a time, by kind.
const trace = { cursor: '', entries: [] };
async function loadTrace(more) {
  if (!more) { trace.cursor = ''; trace.entries = []; }
  const q = new URLSearchParams({ order: 'desc', limit: '100' });
  if (trace.cursor) q.set('cursor', trace.cursor);
  const inspection = await get(`${agent}/inspect?${q}`);
  trace.entries.push(...(inspection.entries.items || []));
  trace.cursor = inspection.entries.next || '';
  $('trace-more').hidden = !trace.cursor;
  const kinds = new Set(trace.entries.map((e) => e.kind));
  const sel = $('trace-kind');
  const chosen = sel.value;
  sel.replaceChildren(el('option', { value: '', text: 'all' }), ...[...kinds].sort().map((k) => el('option', { value: k, text: k, selected: k === chosen })));
  const rows = Object.entries(inspection.usage.models || {}).map(([m, u]) =>
    el('tr', {}, el('td', { text: m }), el('td', { text: String(u.calls) }), el('td', { text: String(u.input_tokens) }), el('td', { text: String(u.output_tokens) })));
  $('usage').replaceChildren(...rows);
  renderTrace();
}

function renderTrace() {
  const kind = $('trace-kind').value;
  $('trace').replaceChildren(...trace.entries.filter((e) => !kind || e.kind === kind).map((e) => {
    const head = `#${e.id} ${new Date(e.at).toLocaleString()} ${e.kind}${e.tool_name ? ` ${e.tool_name}` : ''}${e.run_id ? ` run ${e.run_id}` : ''}`;
    const body = e.text || (e.arguments ? JSON.stringify(e.arguments) : '') || (e.tool_calls ? JSON.stringify(e.tool_calls) : '');
    return el('li', { 'data-kind': e.kind }, el('strong', { text: head }), el('div', { text: body }));
  }));
}

function renderApprovalsPage(approvals) {
  const list = $('approval-list');
  if (!approvals.length) { list.replaceChildren(el('li', { class: 'note', text: 'Nothing waits for you.' })); return; }
  const view = new Timeline(el('ol'), { decide, pending: () => state.pending });
  list.replaceChildren(...approvals.map((a) => {
    const card = view.approvalCard(a);
    card.prepend(el('span', { class: 'label', text: `conversation ${a.conversation_id}, asked ${new Date(a.asked_at).toLocaleString()}` }));
    return card;
  }));
}

const pageLoaders = { trace: () => loadTrace(false), files: showFiles, skills: showSkills, reminders: showReminders, activity: showActivity, settings: showSettings };

function showPage() {
  let page = (location.hash.replace('#/', '') || 'chat').split('?')[0];
  if (!$(`page-${page}`)) page = 'chat';
  for (const a of document.querySelectorAll('nav a[data-page]')) {
    const p = a.dataset.page;
    $(`page-${p}`).hidden = p !== page;
    if (p === page) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  if (pageLoaders[page]) pageLoaders[page]().catch((err) => banner(err.message));
}

$('prompt-form').addEventListener('submit', (ev) => { ev.preventDefault(); sendPrompt(); });
$('prompt').addEventListener('keydown', (ev) => {
  // Enter sends, Shift+Enter is a new line; never while a phone keyboard
  // is composing a word.
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); sendPrompt(); }
});
$('reset').addEventListener('click', () => post(`${agent}/reset?conversation=${rid(state.conversation)}`).catch((err) => banner(err.message)));
$('new-conversation').addEventListener('click', () => post(`${agent}/session/new`, {}).then(loadConversation).catch((err) => banner(err.message)));
$('trace-kind').addEventListener('change', renderTrace);
$('rename-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  post(`${agent}/session/rename`, { id: state.conversation, title: $('rename').value.trim() }).then(() => { $('rename').value = ''; return loadConversation(); }).catch((err) => banner(err.message));
});
$('trace-more').addEventListener('click', () => loadTrace(true).catch((err) => banner(err.message)));
$('sign-out').addEventListener('click', async () => {
  stream.close();
  await fetch('/auth/sign-out', { method: 'POST', headers: { 'Content-Type': 'application/json' }, credentials: 'same-origin' });
  location.assign('/app/sign-in');
});
window.addEventListener('hashchange', showPage);
window.addEventListener('pagehide', () => stream.close()); // the stream stops counting as activity

// The agent picker: every page of this tab talks to one agent (?agent=);
// picking another loads the client for it.
async function loadAgents() {
  const { agents } = await get(`${sandbox}/agents`);
  const names = (agents || []).map((a) => a.name);
  if (!names.includes(agentName)) names.push(agentName);
  $('agent-pick').replaceChildren(...names.map((n) => el('option', { value: n, text: n })));
  $('agent-pick').value = agentName;
}
$('agent-pick').addEventListener('change', () => {
  const u = new URL(location.href);
  u.searchParams.set('agent', $('agent-pick').value);
  location.assign(u);
});

showPage();
loadAgents().catch(() => {});
loadModels().catch(() => {});
loadConversation().catch((err) => banner(`could not load the conversation: ${err.message}`));
export { describeRule };
