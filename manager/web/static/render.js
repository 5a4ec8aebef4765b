// render: cards built from stored entries, with textContent only (entries
// hold model output and outside text: nothing of theirs becomes markup),
// except a reply's text, which the manager renders from markdown and
// sanitizes (markup.js). Each entry renders once, by id, so a reload, a
// reconnect or an entry seen twice changes nothing.
import { showMarkdown } from './markup.js';

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('data-') || k.startsWith('aria-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) if (c) e.append(c);
  return e;
}

// describeRule is a rule in words, as the agent says it ("words"); an agent
// too old to say it gets its raw fields, never a guess.
// say puts a short message in the status line (a polite live region at the
// bottom of the screen); it goes after a while, unless another replaced it,
// so it never covers the text under it for long.
let sayTimer;
export function say(text) {
  const line = document.getElementById('status-line');
  line.textContent = text;
  clearTimeout(sayTimer);
  if (text) sayTimer = setTimeout(() => { if (line.textContent === text) line.textContent = ''; }, 8000);
}

export function describeRule(r) {
  if (!r) return '';
  if (r.words) return r.words;
  return `${r.effect} ${r.tool} ${JSON.stringify(r.when || {})}`;
}

// stamp is an entry's time, short; none for an entry without one.
export function stamp(at) {
  const d = at ? new Date(at) : null;
  if (!d || Number.isNaN(d.getTime()) || d.getFullYear() < 2000) return null;
  const today = new Date().toDateString() === d.toDateString();
  const text = today ? d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : d.toLocaleString([], { dateStyle: 'short', timeStyle: 'short' });
  return el('time', { class: 'time', dateTime: d.toISOString(), title: d.toLocaleString(), text });
}

const pretty = (raw) => {
  try { return JSON.stringify(typeof raw === 'string' ? JSON.parse(raw) : raw, null, 2); } catch { return String(raw); }
};

// Timeline renders one conversation's entries into an <ol>.
// denyConditions names the conditions a deny rule's card lets the owner
// edit, in words.
const denyConditions = { command: 'the command is exactly', command_prefix: 'the command starts with', path_prefix: 'the path is in', host: 'the host is' };

export class Timeline {
  constructor(list, { decide, pending, liveView }) {
    this.list = list;
    this.decide = decide;     // (approvalId, decision, note) => Promise
    this.pending = pending;   // () => Map of pending approval id -> view
    this.liveView = liveView; // the address of the agent's browser page (a take-over's card links it)
    this.clear();
  }

  clear() {
    this.list.replaceChildren();
    this.drafts = new Map();     // run id -> the reply streaming in, not stored yet
    this.seen = new Set();
    this.calls = new Map();      // tool call id -> its <details> row
    this.approvals = new Map();  // approval id -> its card
    this.decisions = new Map();  // approval id -> decision data
    this.stopped = new Set();    // runs the owner stopped: their late deltas are dropped
  }

  // delta shows a reply as it streams in; its stored entry replaces it.
  delta(d) {
    if (this.stopped.has(d.run_id)) return;
    let card = this.drafts.get(d.run_id);
    if (d.text === '') { // a new attempt of the model call: start over
      if (card) card.querySelector('.text').textContent = '';
      return;
    }
    const follow = this.atBottom();
    if (!card) {
      card = el('li', { class: 'assistant draft', 'data-draft': d.run_id }, el('span', { class: 'label', text: 'agent (writing…)' }), el('span', { class: 'text' }));
      this.drafts.set(d.run_id, card);
      this.list.append(card);
    }
    card.querySelector('.text').textContent += d.text;
    if (follow) this.toBottom();
  }

  add(e) {
    if (this.seen.has(e.id)) return;
    this.seen.add(e.id);
    if (['assistant_message', 'error', 'stopped', 'gate', 'retry'].includes(e.kind)) {
      const draft = this.drafts.get(e.run_id);
      if (draft) { draft.remove(); this.drafts.delete(e.run_id); }
    }
    const item = this.card(e);
    if (item) {
      item.dataset.entry = e.id;
      if (e.run_id) item.dataset.run = e.run_id;
      const label = item.querySelector(':scope > .label');
      const t = stamp(e.at);
      if (label && t) label.append(t);
      const follow = this.atBottom();
      this.list.append(item);
      if (follow) this.toBottom();
    }
  }

  // atBottom says whether the reader is at the newest entry (then new
  // entries keep the view there; someone reading back is left alone).
  atBottom() {
    const l = this.list;
    return l.scrollHeight - l.scrollTop - l.clientHeight < 80;
  }

  toBottom() { this.list.scrollTop = this.list.scrollHeight; }

  card(e) {
    switch (e.kind) {
      case 'owner_message':
        return el('li', { class: 'owner' }, el('span', { class: 'label', text: 'you' }), el('span', { class: 'text', text: e.text }));
      case 'assistant_message': {
        const li = el('li', { class: 'assistant' }, el('span', { class: 'label', text: e.model || 'agent' }));
        if (e.text) {
          const text = el('div', { class: 'text', text: e.text });
          li.append(text);
          showMarkdown(text, e.text);
        }
        for (const tc of e.tool_calls || []) {
          const result = el('pre', { class: 'result', text: 'waiting to run' });
          const row = el('details', { class: 'tool' },
            el('summary', { text: `tool ${tc.name}` }),
            el('span', { class: 'label', text: 'arguments' }), el('pre', { text: pretty(tc.arguments) }),
            el('span', { class: 'label', text: 'result' }), result);
          row.result = result;
          this.calls.set(tc.id, row);
          li.append(row);
        }
        return li;
      }
      case 'tool_call': {
        const row = this.calls.get(e.tool_call_id);
        if (row) {
          row.querySelector('summary').textContent = `tool ${e.tool_name} (running…)`;
          row.result.textContent = 'running…';
        }
        return null;
      }
      case 'tool_result': {
        const row = this.calls.get(e.tool_call_id);
        if (!row) return el('li', { class: 'note', text: `${e.tool_name}: ${e.text}` });
        row.result.textContent = e.text;
        row.querySelector('summary').textContent = `tool ${e.tool_name}${e.is_error ? ' (error)' : ''}`;
        return null;
      }
      case 'outside_text': {
        const src = (e.data && e.data.source) || 'elsewhere';
        const box = el('details', { class: 'outside' }, el('summary', { text: `outside text from ${src}` }), el('pre', { text: e.text }));
        const row = this.calls.get(e.tool_call_id);
        if (row) { row.append(box); return null; }
        return el('li', { class: 'note' }, box);
      }
      case 'approval':
        return this.approvalCard(e.data, e.data && this.decisions.get(e.data.id));
      case 'approval_decision': {
        const d = e.data || {};
        this.decisions.set(d.approval_id, d);
        const card = this.approvals.get(d.approval_id);
        if (card) this.markDecided(card, d);
        return null;
      }
      case 'policy':
      case 'note': // a change of the rules or of the notes, in words
        return el('li', { class: 'note', text: e.text });
      case 'reset': return el('li', { class: 'note', text: '— context reset: the agent starts fresh from here —' });
      case 'summary': return el('li', { class: 'note', text: `summary of the earlier conversation: ${e.text}` });
      case 'reminder': return el('li', { class: 'note', text: e.text });
      case 'error': return el('li', { class: 'error', text: e.text });
      case 'retry': return el('li', { class: 'note retry', text: `Retrying: ${e.text}` });
      case 'gate': {
        const d = (e.data && typeof e.data === 'object') ? e.data : {};
        const n = d.refusal && d.of ? ` (${d.refusal} of ${d.of})` : '';
        return el('li', { class: 'note gate', text: `The citation gate refused a reply${n}: ${e.text}. The agent tries again.` });
      }
      case 'stopped': {
        this.stopped.add(e.run_id);
        for (const card of this.list.querySelectorAll(`li.approval[data-run="${Number(e.run_id)}"]`)) this.markDecided(card, { decision: 'closed: the run was stopped' });
        return el('li', { class: 'note stopped' }, el('span', { class: 'label', text: 'stopped by you' }));
      }
      default: return null; // hints and citation records are not cards
    }
  }

  // approvalCard is a pending approval with its three decisions, or, once
  // decided, a read-only record. No button is focused by default, so an
  // Enter meant for the prompt can never approve anything.
  approvalCard(a, decided) {
    const card = el('li', { class: 'approval', 'data-approval': a.id },
      el('span', { class: 'label', text: `approval ${a.id}: ${a.tool} waits for you` }),
      el('pre', { text: pretty(a.arguments) }),
      el('span', { class: 'label', text: `why: ${a.reason}` }),
      el('span', { class: 'label', text: `sha256 ${a.sha256}` }));
    if (a.expires_at && !decided) card.append(el('span', { class: 'label expires', text: `expires ${new Date(a.expires_at).toLocaleString()} unless you decide` }));
    this.approvals.set(a.id, card);
    if (decided) { this.markDecided(card, decided); return card; }
    const view = this.pending().get(a.id);
    const note = el('input', { type: 'text', placeholder: 'note for the agent (with Deny)', 'aria-label': 'note' });
    const act = (decision, rule) => async () => {
      for (const b of card.querySelectorAll('button')) b.disabled = true;
      try {
        await this.decide(a.id, decision, decision.startsWith('deny') ? note.value : '', rule ? rule() : undefined);
        // The buttons are gone: keep the keyboard's place on the card.
        card.tabIndex = -1;
        if (card.isConnected) card.focus({ preventScroll: true });
      } catch (err) {
        for (const b of card.querySelectorAll('button')) b.disabled = false;
        card.append(el('span', { class: 'error', text: err.message }));
      }
    };
    const once = el('button', { type: 'button', class: 'quiet', text: 'Allow once', 'data-decision': 'allow_once' });
    once.addEventListener('click', act('allow_once'));
    const deny = el('button', { type: 'button', class: 'quiet', text: 'Deny', 'data-decision': 'deny' });
    deny.addEventListener('click', act('deny'));
    const actions = el('div', { class: 'actions' }, once, deny, note);
    if (a.tool === 'browser_take_over' && this.liveView) {
      // The hand-back is "Allow once", once the owner is done on the page.
      once.textContent = 'Hand back (allow once)';
      card.insertBefore(el('a', { class: 'button', href: `${this.liveView}/${Number(a.id)}`, text: 'Open the live view', 'data-live-view': '' }), card.querySelector('.label + pre'));
    }
    card.act = act;
    card.append(actions);
    this.offerAlways(card, view);
    return card;
  }

  // offerAlways adds "Allow always", naming the rule it saves, once the
  // pending approval's proposed rule is known (none when no narrow rule fits).
  // "Deny always" likewise names the deny rule it saves (with the note).
  offerAlways(card, view) {
    const actions = card.querySelector('.actions');
    if (!actions || !view) return;
    if (view.proposed_rule && !actions.querySelector('[data-decision="allow_always"]')) {
      const always = el('button', { type: 'button', class: 'quiet', text: `Allow always: ${describeRule(view.proposed_rule)}`, 'data-decision': 'allow_always' });
      always.addEventListener('click', card.act('allow_always'));
      actions.insertBefore(always, actions.children[1]);
    }
    if (view.proposed_deny_rule && !actions.querySelector('[data-decision="deny_always"], .make-rule')) {
      const proposed = view.proposed_deny_rule;
      const fields = Object.entries(proposed.when || {}).filter(([k, v]) => denyConditions[k] && typeof v === 'string');
      if (!fields.length) { // nothing to edit: the rule is the whole tool's
        const never = el('button', { type: 'button', class: 'quiet', text: `Deny and make a rule: ${describeRule(proposed)}`, 'data-decision': 'deny_always' });
        never.addEventListener('click', card.act('deny_always'));
        actions.insertBefore(never, actions.querySelector('input'));
        return;
      }
      // The rule is shown for editing first: the owner may widen "this
      // exact command" to a prefix, say, before it is saved.
      const open = el('button', { type: 'button', class: 'quiet make-rule', text: 'Deny and make a rule…' });
      open.addEventListener('click', () => {
        open.hidden = true;
        const inputs = fields.map(([k, v]) => el('input', { type: 'text', value: v, 'data-condition': k, 'aria-label': denyConditions[k] }));
        const when = () => Object.fromEntries(inputs.map((i) => [i.dataset.condition, i.value]));
        const save = el('button', { type: 'button', class: 'quiet', text: 'Deny, and refuse such calls from now on', 'data-decision': 'deny_always' });
        save.addEventListener('click', card.act('deny_always', () => ({ when: when() })));
        const form = el('div', { class: 'rule-edit' }, el('span', { class: 'label', text: `Refuse every ${proposed.tool} call where` }),
          ...fields.flatMap(([k], i) => [el('label', { text: denyConditions[k] }, inputs[i])]), save);
        actions.after(form);
        // The whole form in view, its Save too, not just the first field.
        form.scrollIntoView({ block: 'nearest' });
        inputs[0].focus({ preventScroll: true });
      });
      actions.insertBefore(open, actions.querySelector('input'));
    }
  }

  // pendingChanged updates the cards once the pending approvals are read.
  pendingChanged() {
    const pending = this.pending();
    for (const [id, card] of this.approvals) this.offerAlways(card, pending.get(id));
  }

  // markDecided makes a card a read-only record: the owner's decision, or
  // the expiry the agent recorded when nobody decided in time.
  markDecided(card, d) {
    card.classList.add('decided');
    if (d.decision === 'expired') card.classList.add('expired');
    for (const gone of card.querySelectorAll('.actions, .expires, .rule-edit')) gone.remove();
    if (!card.querySelector('.decision')) {
      const when = d.at ? new Date(d.at).toLocaleString() : '';
      const text = d.decision === 'expired'
        ? `expired: ${d.note || 'no decision in time'}; the call did not run ${when}`
        : `decided: ${d.decision}${d.note ? ` (“${d.note}”)` : ''} ${when}`;
      card.append(el('span', { class: 'decision', text }));
    }
  }
}
