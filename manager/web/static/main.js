// main: the signed-in client. The address says where the owner is (#/chat/7
// is conversation 7 of the agent in ?agent=, #/approvals a page), so reload
// and Back/Forward return there. Everything shown is read from the store;
// the streams only bring what is new.
import { agent, agentName, agentPath, sandbox, get, post, id as rid } from './api.js';
import { Stream } from './stream.js';
import { Timeline, el, describeRule, stamp, say } from './render.js';
import { Live } from './live.js';

const $ = (id) => document.getElementById(id);
document.body.dataset.up = '1'; // app.html's guard
const state = {
  conversation: 0,          // the conversation shown
  conversations: new Map(), // id -> conversation, as last listed
  pending: new Map(),       // approval id -> pending approval of this agent
  running: new Map(),       // run id -> what it is doing, for the busy line
  queued: [],               // prompts sent, not yet stored as entries
};
const pageNames = { agents: 'Agents', chat: 'Conversation', trace: 'Trace', approvals: 'Approvals', browser: 'Browser', files: 'Files', skills: 'Skills', reminders: 'Reminders & jobs', activity: 'Activity', settings: 'Settings' };

function banner(text) {
  $('banner').textContent = text;
  $('banner').hidden = !text;
}

const titleOf = (c) => (c && c.title) || (c ? `Conversation ${Number(c.id)}` : '');

// The drawer: the rail slides over the page on a phone.
function drawer(open) {
  document.body.classList.toggle('drawer-open', open);
  $('menu').setAttribute('aria-expanded', String(open));
  $('scrim').hidden = !open;
  if (open) $('agent-pick').focus();
}
$('menu').addEventListener('click', () => drawer(true));
$('rail-close').addEventListener('click', () => { drawer(false); $('menu').focus(); });
$('scrim').addEventListener('click', () => drawer(false));
document.addEventListener('keydown', (ev) => {
  if (ev.key === 'Escape' && document.body.classList.contains('drawer-open')) { drawer(false); $('menu').focus(); }
});
$('rail').addEventListener('click', (ev) => { if (ev.target.closest('a')) drawer(false); });

// Pending approvals, every agent's, read from their stores (live.js); the
// live stream says when to read them again.
const refreshPending = () => live.recount();

function showApprovals(lists) {
  const approvals = lists.get(agentName) || [];
  state.pending = new Map(approvals.map((a) => [a.id, a]));
  let total = 0;
  for (const l of lists.values()) total += l.length;
  showPendingCount(total);
  const here = approvals.filter((a) => a.conversation_id !== state.conversation).length;
  const elsewhere = total - approvals.length + here;
  $('more-waiting').textContent = elsewhere ? `${elsewhere} more waiting elsewhere (see Approvals)` : '';
  $('more-waiting').hidden = elsewhere === 0;
  renderApprovalsPage(lists);
  timeline.pendingChanged();
  busyLine();
}

function showPendingCount(total) {
  $('pending-count').textContent = String(total);
  $('pending-count').hidden = total === 0;
  $('pending-pill-count').textContent = String(total);
  $('pending-pill').hidden = total === 0;
  document.title = total ? `(${total}) Affido` : 'Affido';
}

// decider decides an approval of the named agent.
const decider = (name) => async (id, decision, note, rule) => {
  const body = { decision, wait: false };
  if (note) body.note = note;
  if (rule) body.rule = rule;
  await post(`${agentPath(name)}/approvals/${rid(id)}`, body);
  await refreshPending();
};
const decide = decider(agentName);

const timeline = new Timeline($('timeline'), { decide, pending: () => state.pending, liveView: '#/browser' });

// The busy line says what the runs of this conversation are doing.
function track(e) {
  if (!e.run_id) return;
  const run = e.run_id;
  switch (e.kind) {
    case 'owner_message': state.running.set(run, 'working'); break;
    case 'tool_call': state.running.set(run, `running ${e.tool_name}`); break;
    case 'tool_result': state.running.set(run, 'working'); break;
    case 'retry': state.running.set(run, 'retrying'); break;
    case 'assistant_message': if (!(e.tool_calls || []).length) state.running.delete(run); else state.running.set(run, 'working'); break;
    case 'error': case 'stopped': state.running.delete(run); break;
    default:
  }
}

function busyLine() {
  const line = $('run-state');
  const waits = [...state.pending.values()].some((a) => a.conversation_id === state.conversation);
  const doing = [...state.running.values()];
  let text = '';
  if (waits) text = 'Waiting for your decision on an approval';
  else if (doing.some((d) => d.startsWith('running '))) text = `Agent is ${doing.find((d) => d.startsWith('running '))}…`;
  else if (doing.includes('retrying')) text = 'The model did not answer; retrying…';
  else if (doing.length) text = timeline.drafts.size ? 'Agent is writing…' : 'Agent is working…';
  if (state.queued.length) text += `${text ? ' · ' : ''}${state.queued.length} queued`;
  line.textContent = text;
  line.hidden = !text;
  line.classList.toggle('idle', waits);
  $('stop').hidden = state.running.size === 0;
}

// Stop ends this conversation's runs, durably: the agent writes "stopped"
// into the conversation, and the busy line goes with it.
$('stop').addEventListener('click', async () => {
  const runs = [...state.running.keys()];
  $('stop').disabled = true;
  try {
    for (const run of runs) await post(`${agent}/runs/${rid(run)}/stop`).catch((err) => { if (err.status !== 409) throw err; });
    sendError('');
  } catch (err) {
    sendError(`Could not stop: ${err.message}`);
  } finally {
    $('stop').disabled = false;
  }
});

const stream = new Stream({
  onEntry: (e) => {
    if (e.conversation_id !== state.conversation) return;
    if (e.kind === 'owner_message') unqueue(e.text);
    timeline.add(e);
    track(e);
    busyLine();
    if (e.kind === 'approval' || e.kind === 'approval_decision') refreshPending().catch(() => {});
    if (e.kind === 'citation') showCitations(e.run_id);
  },
  onDelta: (d) => { timeline.delta(d); busyLine(); },
  onState: (s) => {
    $('stream-state').dataset.state = s;
    $('stream-state').textContent = s === 'live' ? 'live' : s === 'reconnecting' ? 'reconnecting…' : 'connecting…';
    if (s === 'live') banner('');
  },
});

// The owner's live stream: every agent's approvals, reminders, jobs and
// spend stops, whatever page is open.
const live = new Live({
  onApprovals: showApprovals,
  onNotice: (n) => {
    if ((n.kind === 'reminder' || n.kind === 'job') && !$('page-reminders').hidden) pageLoaders.reminders().catch(() => {});
    // A connector's tool turned off by itself: say so, and show it if Settings is open.
    if (n.kind === 'connector') {
      say(String(n.text || ''));
      if (!$('page-settings').hidden) pageLoaders.settings().catch(() => {});
    }
  },
});

// renderConversations lists the agent's conversations in the rail, newest
// first, those matching the search only.
function renderConversations() {
  const q = $('conversation-search').value.trim().toLowerCase();
  const archived = $('show-archived').checked;
  const items = [...state.conversations.values()].filter((c) => !!c.archived === archived && (!q || titleOf(c).toLowerCase().includes(q)));
  $('conversation-list').replaceChildren(...items.map((c) => {
    const a = el('a', { href: `#/chat/${Number(c.id)}`, text: titleOf(c), title: titleOf(c) });
    if (c.id === state.conversation) a.setAttribute('aria-current', 'true');
    return el('li', {}, a);
  }));
  if (!items.length) $('conversation-list').replaceChildren(el('li', { class: 'empty', text: q ? 'No conversation has that in its title.' : 'No conversations yet.' }));
}
$('conversation-search').addEventListener('input', () => {
  renderConversations();
  clearTimeout(state.searchTimer);
  state.searchTimer = setTimeout(searchMessages, 250);
});

// searchMessages finds the words in what was written, across this agent's
// conversations (the agent's full-text index), below the titles found.
async function searchMessages() {
  const q = $('conversation-search').value.trim();
  const box = $('search-results');
  if (q.length < 2) { box.hidden = true; box.replaceChildren(); return; }
  let results = [];
  try { ({ results } = await get(`${agent}/search?q=${encodeURIComponent(q)}&limit=20`)); } catch (err) { results = []; }
  if ($('conversation-search').value.trim() !== q) return; // typed on meanwhile
  box.replaceChildren(el('li', { class: 'empty', text: results.length ? 'In messages:' : 'No message has that.' }),
    ...results.map((r) => el('li', {}, el('a', { href: `#/chat/${Number(r.entry.conversation_id)}`, title: r.snippet },
      el('strong', { text: r.title || `Conversation ${Number(r.entry.conversation_id)}` }), el('span', { class: 'snippet', text: r.snippet })))));
  box.hidden = false;
}
$('show-archived').addEventListener('change', () => listConversations().catch((err) => banner(err.message)));
// Archive puts the conversation away (or back): it leaves the list, and
// stays readable at its address.
$('archive').addEventListener('click', () => {
  const c = state.conversations.get(state.conversation);
  const archived = !(c && c.archived);
  post(`${agent}/session/archive`, { id: state.conversation, archived }).then((r) => {
    state.conversations.set(state.conversation, { ...(c || { id: state.conversation }), archived: r.archived });
    showArchived();
    return listConversations();
  }).catch((err) => banner(err.message));
});

// Delete: two presses, no dialog (the first asks); refused while the
// conversation has work in flight, and for the agent's root conversation.
$('delete-conversation').addEventListener('click', () => {
  const b = $('delete-conversation');
  if (!b.dataset.armed) { b.dataset.armed = '1'; b.textContent = 'Delete it, all of it?'; return; }
  post(`${agent}/session/delete`, { id: state.conversation }).then(() => {
    state.conversations.delete(state.conversation);
    state.conversation = 0;
    location.hash = '#/chat';
  }).catch((err) => banner(`Not deleted: ${err.message}`)).finally(() => disarmDelete());
});

function disarmDelete() {
  delete $('delete-conversation').dataset.armed;
  $('delete-conversation').textContent = 'Delete';
}

function showArchived() {
  disarmDelete();
  const c = state.conversations.get(state.conversation);
  $('archive').textContent = c && c.archived ? 'Unarchive' : 'Archive';
}

async function listConversations() {
  const sessions = await get(`${agent}/sessions${$('show-archived').checked ? '?archived=1' : ''}`);
  const shown = state.conversations.get(state.conversation); // kept, even when not listed
  state.conversations = new Map((sessions.conversations || []).map((c) => [c.id, c]));
  if (shown && !state.conversations.has(shown.id)) state.conversations.set(shown.id, shown);
  renderConversations();
  return sessions.current;
}

// loadConversation renders conversation id (the agent's current one for 0)
// from the store, then follows the stream from the last entry it rendered.
async function loadConversation(id) {
  const current = await listConversations();
  const want = id || current;
  const inspection = await get(`${agent}/inspect?limit=1000&conversation=${rid(want)}`);
  state.conversation = inspection.conversation.id;
  state.conversations.set(state.conversation, inspection.conversation);
  // The box says what this conversation requires; a prompt may still ask for it.
  $('cite').checked = (inspection.conversation.settings || {}).citations === 'required';
  if (!id) history.replaceState(null, '', `#/chat/${state.conversation}`);
  renderConversations();
  showWhere();
  showArchived();
  timeline.clear();
  shownCitations.clear();
  state.running.clear();
  let last = 0;
  const cited = new Set();
  for (const e of inspection.entries.items || []) {
    timeline.add(e);
    track(e);
    last = Math.max(last, e.id);
    if (e.kind === 'citation') cited.add(e.run_id);
  }
  // Prompts admitted but not yet taken (a run ahead of them waits) show
  // as queued, from the store, so a reload keeps them.
  state.queued = [];
  for (const sub of inspection.submissions || []) {
    if (sub.status === 'queued' && sub.input && sub.input.text) queue(sub.input.text);
  }
  timeline.toBottom();
  refreshPending();
  for (const run of cited) showCitations(run);
  stream.open(state.conversation, last);
  busyLine();
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
    const row = el('div', { 'data-cite': String(c.id) }, el('span', { class: c.verified ? 'good' : 'bad', text: c.verified ? 'verified ' : `failed (${c.problem}) ` }),
      el('blockquote', { text: `“${c.quote}”` }),
      el('span', { class: 'label', text: `[${c.id}] ${c.doc} v${c.version} lines ${c.line_start}–${c.line_end}` }), open, lines);
    row.open = open;
    box.append(row);
  }
  answer.append(box);
}

// A citation marker in a reply opens its quote and the stored lines.
$('timeline').addEventListener('click', (ev) => {
  const a = ev.target.closest('a.cite');
  if (!a) return;
  ev.preventDefault();
  const li = a.closest('li');
  const row = li && [...li.querySelectorAll('.citations [data-cite]')].find((r) => r.dataset.cite === a.dataset.cite);
  if (!row) return;
  row.closest('details').open = true;
  row.scrollIntoView({ block: 'nearest' });
  row.classList.add('target');
  row.open.click();
});

async function loadModels() {
  const { models, default: def } = await get(`${agent}/models`);
  $('model').replaceChildren(...models.map((m) => el('option', { value: m, text: m, selected: m === def })));
}

// A prompt sent but not yet stored shows as queued (a run may be waiting
// on the owner, and the agent takes prompts in turn).
function queue(text) {
  const card = el('li', { class: 'owner queued' }, el('span', { class: 'label', text: 'you · queued' }), el('span', { class: 'text', text }));
  state.queued.push({ text, card });
  $('timeline').append(card);
  timeline.toBottom();
  busyLine();
}

function unqueue(text) {
  const i = state.queued.findIndex((q) => q.text === text);
  if (i < 0) return;
  state.queued[i].card.remove();
  state.queued.splice(i, 1);
}

function sendError(text) {
  $('send-error').textContent = text;
  $('send-error').hidden = !text;
}

function sendPrompt() {
  const text = $('prompt').value.trim();
  if (!text) return;
  $('prompt').value = '';
  grow();
  // The request id makes a resend after a failure the same prompt, once.
  if (text !== state.unsentText) state.requestId = crypto.randomUUID();
  const body = { text, model: $('model').value, wait: false, requestId: state.requestId, conversation: state.conversation };
  if ($('cite').checked) body.citations = 'required';
  const conversation = state.conversation;
  queue(text);
  post(`${agent}/prompt`, body).then(() => {
    state.unsentText = null;
    sendError('');
    const c = state.conversations.get(conversation);
    if (c && !c.title) listConversations().then(showWhere).catch(() => {});
  }).catch((err) => {
    unqueue(text);
    busyLine();
    sendError(`Not sent: ${err.message}. Press Send to try again.`);
    state.unsentText = text;
    if (!$('prompt').value) $('prompt').value = text;
    grow();
  });
}

// The composer grows with what is typed, up to a third of the screen.
function grow() {
  const t = $('prompt');
  t.style.height = 'auto';
  t.style.height = `${Math.min(t.scrollHeight + 2, window.innerHeight * 0.4)}px`;
}
$('prompt').addEventListener('input', grow);

// The trace: every entry, newest first, a page at a time, by kind.
const trace = { cursor: '', entries: [], prices: {} };
async function loadTrace(more) {
  if (!more) {
    trace.cursor = ''; trace.entries = [];
    // Each model's prices, to say what a call cost (none when spend is off).
    trace.prices = (await get('/api/spend').catch(() => ({}))).prices || {};
  }
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

// renderTrace shows the entries as a tree: each run (newest first), its
// model calls with their tokens and duration, each call's tool calls with
// their results; entries of no run stand alone. Each entry has an anchor
// (#entry-<id>) that Activity links to.
function renderTrace() {
  const kind = $('trace-kind').value;
  const shown = trace.entries.filter((e) => !kind || e.kind === kind);
  const runs = new Map(); // run id -> its entries, oldest first
  const items = [];       // [sort key, element]
  for (const e of shown) {
    if (!e.run_id) { items.push([e.id, traceRow(e)]); continue; }
    if (!runs.has(e.run_id)) runs.set(e.run_id, []);
    runs.get(e.run_id).push(e);
  }
  for (const [run, list] of runs) {
    list.sort((a, b) => a.id - b.id);
    items.push([list[list.length - 1].id, traceRun(run, list)]);
  }
  items.sort((a, b) => b[0] - a[0]);
  $('trace').replaceChildren(...items.map((i) => i[1]));
}

const usageOf = (e) => {
  try { return typeof e.data === 'string' ? JSON.parse(e.data) : (e.data || {}); } catch { return {}; }
};

function traceRow(e) {
  const head = `#${e.id} ${e.kind}${e.tool_name ? ` ${e.tool_name}` : ''} `;
  const body = e.text || (e.arguments ? JSON.stringify(e.arguments) : '') || (e.tool_calls ? JSON.stringify(e.tool_calls) : '');
  return el('li', { 'data-kind': e.kind, id: `entry-${e.id}` }, el('strong', { text: head }), stamp(e.at), el('div', { text: body }));
}

function traceRun(run, list) {
  let inTok = 0; let outTok = 0; let calls = 0;
  const children = [];
  const byCall = new Map(); // tool call id -> its <ol>
  for (const e of list) {
    if (e.kind === 'assistant_message') {
      const u = usageOf(e);
      calls += 1; inTok += u.input_tokens || 0; outTok += u.output_tokens || 0;
      const sub = el('ol');
      const price = trace.prices[e.model];
      const cost = price && typeof u.input_tokens === 'number'
        ? ` · $${((u.input_tokens * price.input_per_million + u.output_tokens * price.output_per_million) / 1e6).toFixed(6)}` : '';
      const li = el('li', { 'data-kind': e.kind, id: `entry-${e.id}`, class: 'model-call' },
        el('strong', { text: `model call ${e.model || ''}` }), ' ',
        el('span', { class: 'label', text: `${u.input_tokens ?? '?'} in · ${u.output_tokens ?? '?'} out tokens · ${u.duration_ms ?? '?'} ms${cost}` }),
        e.text ? el('div', { text: e.text }) : null, sub);
      for (const tc of e.tool_calls || []) {
        const calls2 = el('ol');
        sub.append(el('li', { 'data-kind': 'tool_call' }, el('strong', { text: `tool ${tc.name}` }), el('div', { text: typeof tc.arguments === 'string' ? tc.arguments : JSON.stringify(tc.arguments) }), calls2));
        byCall.set(tc.id, calls2);
      }
      children.push(li);
    } else if ((e.kind === 'tool_call' || e.kind === 'tool_result' || e.kind === 'outside_text') && byCall.has(e.tool_call_id)) {
      byCall.get(e.tool_call_id).append(traceRow(e));
    } else {
      children.push(traceRow(e));
    }
  }
  const first = list[0]; const last = list[list.length - 1];
  const ms = new Date(last.at) - new Date(first.at);
  const summary = `run ${run} · ${calls} model call${calls === 1 ? '' : 's'} · ${inTok} in / ${outTok} out tokens · ${Number.isFinite(ms) ? `${(ms / 1000).toFixed(1)} s` : ''}`;
  return el('li', { class: 'run', 'data-run': run }, el('details', { open: true }, el('summary', {}, el('strong', { text: summary }), ' ', stamp(first.at)), el('ol', {}, ...children)));
}

// renderApprovalsPage lists every agent's waiting approvals, oldest first,
// each naming its agent and conversation and decided on its own agent.
function renderApprovalsPage(lists) {
  const list = $('approval-list');
  const hadFocus = list.contains(document.activeElement);
  const cards = [];
  for (const [name, approvals] of lists) {
    const pending = new Map(approvals.map((a) => [a.id, a]));
    const liveView = name === agentName ? '#/browser' : `?agent=${encodeURIComponent(name)}#/browser`;
    const view = new Timeline(el('ol'), { decide: decider(name), pending: () => pending, liveView });
    for (const a of approvals) {
      const card = view.approvalCard(a);
      card.dataset.agent = name;
      const conv = name === agentName ? state.conversations.get(a.conversation_id) : null;
      const href = name === agentName ? `#/chat/${Number(a.conversation_id)}` : `?agent=${encodeURIComponent(name)}#/chat/${Number(a.conversation_id)}`;
      const where = el('a', { href, text: conv ? titleOf(conv) : `conversation ${Number(a.conversation_id)}` });
      card.prepend(el('span', { class: 'label' }, `agent ${name} · in `, where, ' · asked ', stamp(a.asked_at) || 'at a time not recorded'));
      cards.push([a.asked_at || '', card]);
    }
  }
  cards.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
  if (!cards.length) list.replaceChildren(el('li', { class: 'note', text: 'Nothing waits for you.' }));
  else list.replaceChildren(...cards.map((c) => c[1]));
  // A decision re-draws the list: the keyboard stays in it.
  if (hadFocus) { list.tabIndex = -1; list.focus({ preventScroll: true }); }
}

// The other pages' code (pages.js, agents.js and what they import) is
// fetched when one of them first opens: web.go preloads only what the
// conversation needs. Such a page is shown only once its module has run,
// so its controls have their handlers before anyone can use them.
const pageModules = {
  files: () => import('./pages.js'), skills: () => import('./pages.js'), reminders: () => import('./pages.js'),
  activity: () => import('./pages.js'), settings: () => import('./pages.js'), agents: () => import('./agents.js'),
  browser: () => import('./takeover.js'),
};
const onPage = (name) => () => import('./pages.js').then((m) => m[name]());
const pageLoaders = {
  trace: () => loadTrace(false), approvals: refreshPending,
  files: onPage('showFiles'), skills: onPage('showSkills'), reminders: onPage('showReminders'),
  activity: onPage('showActivity'), settings: onPage('showSettings'),
  agents: () => import('./agents.js').then((m) => m.showAgents()),
  browser: () => import('./takeover.js').then((m) => m.showBrowser(live)),
};

// route reads the address: #/chat/<id>, #/chat, #/trace/<entry id> or
// #/<page>.
function route() {
  const [page, arg] = location.hash.replace(/^#\/?/, '').split('?')[0].split('/');
  return { page: $(`page-${page}`) ? page : 'chat', conversation: /^[1-9][0-9]{0,15}$/.test(arg || '') ? Number(arg) : 0 };
}

function showWhere() {
  const { page } = route();
  $('where-agent').textContent = `agent ${agentName}`;
  $('where-title').textContent = page === 'chat' ? titleOf(state.conversations.get(state.conversation)) || 'Conversation' : pageNames[page];
}

// loadOrRetry loads a conversation; while the sandbox is starting (503),
// busy or unreachable it says so and tries again, with backoff, as long as
// the owner is still on that conversation. A refusal (404, 403) is final.
function loadOrRetry(conversation, delay) {
  loadConversation(conversation).catch((err) => {
    if (err.status && err.status !== 429 && err.status < 500) {
      banner(`Could not load the conversation: ${err.message}`);
      return;
    }
    banner(`Could not load the conversation yet (${err.message}); trying again…`);
    setTimeout(() => {
      const now = route();
      if (now.page === 'chat' && (now.conversation || 0) === (conversation || 0)) loadOrRetry(conversation, Math.min(delay * 2, 15000));
    }, delay);
  });
}

// showPage shows the page the address names, once its code is here.
function showPage() {
  const { page } = route();
  const load = pageModules[page];
  if (!load) { showRoute(); return; }
  const opening = `Opening ${pageNames[page]}…`;
  say(opening);
  load().then(() => {
    if ($('status-line').textContent === opening) say('');
    if (route().page === page) showRoute(); // the owner may have moved on meanwhile
  }, (err) => banner(`Could not open ${pageNames[page]}: ${err.message}`));
}

function showRoute() {
  const { page, conversation } = route();
  for (const a of document.querySelectorAll('.pages a[data-page]')) {
    const p = a.dataset.page;
    $(`page-${p}`).hidden = p !== page;
    if (p === page) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  showWhere();
  if (page === 'chat') {
    if (!conversation || conversation !== state.conversation) loadOrRetry(conversation, 1000);
    return;
  }
  if (pageLoaders[page]) {
    pageLoaders[page]().then(() => {
      // #/trace/<entry id>: that entry, in view and marked.
      const target = page === 'trace' && conversation ? $(`entry-${conversation}`) : null;
      if (target) { target.classList.add('target'); target.scrollIntoView({ block: 'center' }); }
    }).catch((err) => banner(err.message));
  }
}

$('prompt-form').addEventListener('submit', (ev) => { ev.preventDefault(); sendPrompt(); });
$('prompt').addEventListener('keydown', (ev) => {
  // Enter sends, Shift+Enter is a new line; never while a phone keyboard
  // is composing a word.
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); sendPrompt(); }
});
$('reset').addEventListener('click', () => post(`${agent}/reset?conversation=${rid(state.conversation)}`).catch((err) => sendError(err.message)));
$('new-conversation').addEventListener('click', () => post(`${agent}/session/new`, {}).then((c) => {
  drawer(false);
  location.hash = `#/chat/${rid(c.conversation_id)}`;
}).catch((err) => banner(err.message)));
$('trace-kind').addEventListener('change', renderTrace);
$('rename-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const title = $('rename').value.trim();
  if (!title) return;
  post(`${agent}/session/rename`, { id: state.conversation, title }).then(() => { $('rename').value = ''; return listConversations().then(showWhere); }).catch((err) => banner(err.message));
});
$('trace-more').addEventListener('click', () => loadTrace(true).catch((err) => banner(err.message)));
$('sign-out').addEventListener('click', async () => {
  stream.close();
  live.close();
  await fetch('/auth/sign-out', { method: 'POST', headers: { 'Content-Type': 'application/json' }, credentials: 'same-origin' });
  location.assign('/app/sign-in');
});
window.addEventListener('hashchange', showPage);
// Back to the page (a phone unlocked, a tab chosen): what changed elsewhere
// meanwhile (conversations made with curl, approvals) is read again.
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState !== 'visible') return;
  listConversations().then(showWhere).catch(() => {});
  refreshPending();
});
window.addEventListener('pagehide', () => { stream.close(); live.close(); }); // the streams stop counting as activity

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
  u.hash = '#/chat';
  location.assign(u);
});

showPage();
live.open();
loadAgents().catch(() => {});
loadModels().catch(() => {});
export { describeRule };
