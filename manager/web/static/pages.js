// pages: files, skills, reminders and jobs, activity and settings. Each reads the
// store through the API every time it is shown; nothing is cached.
import { agent, agentName, agentPath, sandbox, call, get, post, id } from './api.js';
import { el, describeRule, say } from './render.js';
import { showPush } from './push.js';
import { showConnectors } from './connectors.js';

const $ = (id) => document.getElementById(id);
const fail = (err) => say(`error: ${err.message}`);
// when is a time as the owner reads it; none (or Go's zero time) is a dash.
const when = (t) => {
  const d = t ? new Date(t) : null;
  return d && !Number.isNaN(d.getTime()) && d.getFullYear() >= 2000 ? d.toLocaleString() : '—';
};
const usd = (micros) => (micros === undefined || micros === null ? '—' : (micros / 1e6).toFixed(4));

// upload sends bytes as they are (uploads and ingest take raw bodies).
async function upload(method, path, body) {
  const resp = await fetch(path, { method, body, credentials: 'same-origin', headers: { 'Content-Type': 'application/octet-stream' } });
  if (!resp.ok) {
    let detail = resp.statusText;
    try { detail = (await resp.json()).detail || detail; } catch { /* not JSON */ }
    throw new Error(detail);
  }
  return resp.json();
}

// Files: browse the workspace, upload by drop or picker, download, delete,
// ingest a file into the corpus.
const files = { path: '.' };
export async function showFiles() {
  $('files-path').textContent = files.path === '.' ? '/' : `/${files.path}`;
  $('files-up').hidden = files.path === '.';
  let list = [];
  try {
    list = (await get(`${sandbox}/files?path=${encodeURIComponent(files.path)}`)).files || [];
  } catch (err) {
    if (err.status !== 404) throw err; // an empty workspace has no uploads/ yet
  }
  $('file-list').replaceChildren(...list.map((f) => {
    const name = f.dir ? el('button', { type: 'button', class: 'link', text: `${f.name}/` }) : el('a', { href: `${sandbox}/file?path=${encodeURIComponent(f.path)}`, text: f.name, download: f.name });
    if (f.dir) name.addEventListener('click', () => { files.path = f.path; showFiles().catch(fail); });
    // Two steps, no dialog: the first press asks, the second deletes.
    const del = el('button', { type: 'button', class: 'quiet', text: 'Delete', 'data-action': 'delete' });
    del.addEventListener('click', async () => {
      if (!del.dataset.armed) {
        del.dataset.armed = '1';
        del.textContent = f.dir ? 'Delete it and all in it?' : 'Really delete?';
        return;
      }
      await call('DELETE', `${sandbox}/files?path=${encodeURIComponent(f.path)}`).catch(fail);
      showFiles().catch(fail);
    });
    const actions = el('td', {}, del);
    if (!f.dir) {
      const ingest = el('button', { type: 'button', class: 'quiet', text: 'Ingest', 'data-action': 'ingest' });
      ingest.addEventListener('click', async () => {
        try {
          const bytes = await (await fetch(`${sandbox}/file?path=${encodeURIComponent(f.path)}`, { credentials: 'same-origin' })).blob();
          const v = await upload('POST', `${sandbox}/ingest?name=${encodeURIComponent(f.name)}`, bytes);
          say(`ingested ${v.doc || f.name} version ${v.version}`);
        } catch (err) { fail(err); }
      });
      actions.append(' ', ingest);
    }
    return el('tr', { 'data-path': f.path }, el('td', {}, name), el('td', { text: f.dir ? '' : String(f.size) }), el('td', { text: when(f.modified) }), actions);
  }));
}

async function uploadFiles(list) {
  for (const f of list) {
    try {
      await upload('PUT', `${sandbox}/uploads/${encodeURIComponent(f.name)}`, f);
      say(`uploaded uploads/${f.name}`);
    } catch (err) { fail(err); }
  }
  files.path = 'uploads';
  await showFiles();
}

$('upload').addEventListener('change', (ev) => uploadFiles([...ev.target.files]).catch(fail));
$('files-up').addEventListener('click', () => {
  files.path = files.path.includes('/') ? files.path.slice(0, files.path.lastIndexOf('/')) : '.';
  showFiles().catch(fail);
});
const drop = $('drop');
drop.addEventListener('dragover', (ev) => { ev.preventDefault(); drop.classList.add('over'); });
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (ev) => {
  ev.preventDefault();
  drop.classList.remove('over');
  uploadFiles([...ev.dataTransfer.files]).catch(fail);
});

// Skills: installed ones with whether they still match their record; the
// marketplace with descriptions and versions; install and remove.
export async function showSkills() {
  const [installed, market] = await Promise.all([get(`${sandbox}/skills`), get(`${sandbox}/skills/marketplace`)]);
  const have = new Map((installed.skills || []).map((s) => [s.name, s]));
  $('installed-skills').replaceChildren(...(installed.skills || []).map((s) => {
    const rm = el('button', { type: 'button', class: 'quiet', text: 'Remove' });
    rm.addEventListener('click', () => call('DELETE', `${sandbox}/skills/${encodeURIComponent(s.name)}`).then(showSkills).catch(fail));
    return el('li', { 'data-skill': s.name },
      el('span', {}, el('strong', { text: `${s.name} ${s.version}` }), ` ${s.description} `,
        el('span', { class: s.ok ? 'good' : 'bad', text: s.ok ? 'matches its record' : `not ok: ${s.problem}` }),
        el('span', { class: 'label', text: s.digest })),
      rm);
  }));
  if (!(installed.skills || []).length) $('installed-skills').replaceChildren(el('li', { class: 'muted', text: 'No skills yet: your agent starts with none.' }));
  $('market-skills').replaceChildren(...(market.skills || []).map((s) => {
    const item = el('li', { 'data-market': s.name }, el('span', {}, el('strong', { text: `${s.name} ${s.latest}` }), ` ${s.description} `,
      el('span', { class: 'label', text: `versions: ${(s.versions || []).join(', ')}` })));
    if (have.has(s.name)) {
      item.append(el('span', { class: 'muted', text: 'installed' }));
    } else {
      const inst = el('button', { type: 'button', class: 'quiet', text: 'Install' });
      inst.addEventListener('click', () => { inst.disabled = true; post(`${sandbox}/skills/install`, { name: s.name }).then(showSkills).catch((err) => { inst.disabled = false; fail(err); }); });
      item.append(inst);
    }
    return item;
  }));
}

// Reminders and scheduled jobs: list, cancel; jobs also pause, resume and
// are made here (the owner's own, so they do not ask).
export async function showReminders() {
  const [{ reminders, ended }, { jobs }] = await Promise.all([get(`${agent}/reminders`), get(`${agent}/jobs`)]);
  $('reminder-history').replaceChildren(...(ended || []).map((r) => el('li', { 'data-ended': r.ended },
    el('span', {}, el('strong', { text: `${r.ended} ${when(r.at)}` }), ` ${r.text}`, el('span', { class: 'label', text: `due ${when(r.due)}` })))));
  if (!(ended || []).length) $('reminder-history').replaceChildren(el('li', { class: 'muted', text: 'None yet.' }));
  if (!reminders.length) {
    $('reminder-list').replaceChildren(el('li', { class: 'muted', text: 'No reminders are waiting.' }));
  } else {
    $('reminder-list').replaceChildren(...reminders.map((r) => {
      const cancel = el('button', { type: 'button', class: 'quiet', text: 'Cancel' });
      // A reminder that fired meanwhile answers 409: say so, and list again.
      cancel.addEventListener('click', () => post(`${agent}/reminders/${id(r.id)}/cancel`).then(showReminders).catch((err) => { fail(err); showReminders().catch(fail); }));
      return el('li', {}, el('span', {}, el('strong', { text: when(r.due) }), ` ${r.text}`), cancel);
    }));
  }
  if (!jobs.length) {
    $('job-list').replaceChildren(el('li', { class: 'muted', text: 'No scheduled jobs.' }));
    return;
  }
  $('job-list').replaceChildren(...jobs.map((j) => {
    const paused = j.state === 'paused';
    const toggle = el('button', { type: 'button', class: 'quiet', text: paused ? 'Resume' : 'Pause', 'data-action': paused ? 'resume' : 'pause' });
    toggle.addEventListener('click', () => post(`${agent}/jobs/${id(j.id)}/${paused ? 'resume' : 'pause'}`).then(showReminders).catch(fail));
    const del = el('button', { type: 'button', class: 'quiet', text: 'Delete', 'data-action': 'delete' });
    del.addEventListener('click', () => call('DELETE', `${agent}/jobs/${id(j.id)}`).then(showReminders).catch(fail));
    const last = j.last_run ? `; last ran ${when(j.last_run)} (${j.last_late_ms || 0} ms late)` : '';
    return el('li', { 'data-job': j.id, 'data-state': j.state },
      el('span', {}, el('strong', { text: `${j.name || `job ${j.id}`}: ${j.cron} (${j.tz})` }), ` ${j.prompt} `,
        el('span', { class: 'label', text: `${paused ? 'paused' : `next ${when(j.next)}`}; ${j.runs} runs${last}${j.from ? `; made at ${j.from}'s message` : ''}` })),
      el('span', { class: 'actions' }, toggle, del));
  }));
}

$('job-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const job = { cron: $('job-cron').value.trim(), tz: $('job-tz').value.trim(), prompt: $('job-prompt').value.trim() };
  if ($('job-name').value.trim()) job.name = $('job-name').value.trim();
  post(`${agent}/jobs`, job).then((j) => {
    say(`job ${j.id} made; next at ${when(j.next)}`);
    for (const f of ['job-cron', 'job-prompt', 'job-name']) $(f).value = '';
    return showReminders();
  }).catch(fail);
});
$('job-tz').value = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';

// Activity: one timeline of what the agent did (its runs, tool calls,
// approvals, reminders) and what the sandbox lived through (provisioned,
// paused, woken, stopped, removed) and the notifications, newest first.
export async function showActivity() {
  // Every agent's newest entries, across all its conversations.
  const [mine, { agents }] = await Promise.all([get('/api/activity'), get(`${sandbox}/agents`)]);
  const names = (agents || []).map((a) => a.name);
  const lists = await Promise.all(names.map((n) => get(`${agentPath(n)}/activity?limit=100`).then((r) => r.entries || []).catch(() => [])));
  const rows = [];
  names.forEach((name, i) => {
    for (const e of lists[i]) {
      if (['reset', 'hint', 'citation', 'summary'].includes(e.kind)) continue;
      const what = e.kind === 'tool_call' ? `called ${e.tool_name}` : e.kind === 'tool_result' ? `${e.tool_name} returned${e.is_error ? ' an error' : ''}` : e.kind.replace('_', ' ');
      rows.push({ at: e.at, source: 'agent', text: `${name}: ${what}${e.text ? `: ${e.text.slice(0, 160)}` : ''}`, entry: name === agentName ? e.id : 0 });
    }
  });
  for (const ev of mine.events || []) rows.push({ at: ev.at, source: 'sandbox', text: `${ev.kind.replace('sandbox.', '')} ${Object.keys(ev.detail || {}).length ? JSON.stringify(ev.detail) : ''}` });
  for (const n of mine.notifications || []) rows.push({ at: n.created_at, source: 'notification', text: `${n.status} after ${n.tries} tries${n.last_error ? ` (${n.last_error})` : ''}: ${n.text.slice(0, 160)}` });
  rows.sort((a, b) => new Date(b.at) - new Date(a.at));
  const filter = $('activity-filter').value;
  $('activity-list').replaceChildren(...rows.filter((r) => !filter || r.source === filter).map((r) => {
    const li = el('li', { 'data-source': r.source }, el('strong', { text: `${when(r.at)} ${r.source} ` }), el('span', { text: r.text }));
    if (r.entry) li.append(' ', el('a', { href: `#/trace/${Number(r.entry)}`, text: `entry ${r.entry}` }));
    return li;
  }));
}
$('activity-filter').addEventListener('change', () => showActivity().catch(fail));

// Settings: the sandbox, notifications, rules, connectors, spend, sessions, tokens.
export async function showSettings() {
  showPush().catch((err) => { $('push-state').textContent = `Notifications on this device: ${err.message}`; });
  showConnectors().catch((err) => { $('connector-error').textContent = err.message; });
  const [sb, notify, rules, spend, sessions, tokens] = await Promise.all([
    get('/api/sandbox'), get('/api/notify'), get(`${agent}/rules`), get('/api/spend').catch(() => null), get('/api/sessions'), get('/api/tokens')]);
  const wake = sb.reported_wake_at || sb.wake_at;
  $('sandbox-state').textContent = `state: ${sb.state}; last active ${when(sb.last_active_at)}; next wake ${wake ? when(wake) : 'none'}`;
  $('notify-url').value = notify.url || '';
  $('notify-state').textContent = notify.url ? `notifications go to ${notify.url}` : 'no ntfy URL: notifications go only to the devices notified above (none: they are kept, not sent)';
  const tools = Object.keys(rules.defaults || {}).sort();
  const chosen = $('rule-tool').value;
  $('rule-tool').replaceChildren(...tools.map((t) => el('option', { value: t, text: `${t} (default ${rules.defaults[t]})` })));
  if (tools.includes(chosen)) $('rule-tool').value = chosen;
  ruleForm.conditions = rules.conditions || {};
  ruleForm.needsConfirm = rules.needs_confirm || [];
  offerConditions();
  $('rule-list').replaceChildren(...(rules.rules || []).map((r) => {
    const del = el('button', { type: 'button', class: 'quiet', text: 'Remove' });
    del.addEventListener('click', () => call('DELETE', `${agent}/rules/${id(r.id)}`).then(showSettings).catch(fail));
    return el('li', { 'data-rule': r.id, title: JSON.stringify({ tool: r.tool, effect: r.effect, when: r.when || {} }) },
      el('span', { text: `#${r.id} ${describeRule(r)}` }), del);
  }));
  if (!(rules.rules || []).length) $('rule-list').replaceChildren(el('li', { class: 'muted', text: 'No rules: read-only tools run, everything else asks you.' }));
  // Spend by model today and this month, against the limits.
  const total = (m) => Object.values(m || {}).reduce((a, b) => a + b, 0);
  const rowsOf = (label, spent, limit) => el('tr', {}, el('td', { text: label }), el('td', { text: usd(spent) }), el('td', { text: usd(limit) }));
  const spendRows = spend ? [rowsOf('today', total(spend.today_micros), spend.daily_limit_micros), rowsOf('this month', total(spend.month_micros), spend.monthly_limit_micros),
    ...Object.entries(spend.month_micros || {}).map(([m, v]) => rowsOf(`  ${m} this month`, v, null))] : [];
  $('spend').replaceChildren(...spendRows);
  $('another-day').disabled = !spend || spend.another_day_allowed_today;
  $('session-list').replaceChildren(...sessions.sessions.map((s) => {
    const rev = el('button', { type: 'button', class: 'quiet', text: s.current ? 'This session' : 'Revoke', disabled: s.current });
    rev.addEventListener('click', () => call('DELETE', `/api/sessions/${id(s.id)}`).then(showSettings).catch(fail));
    return el('li', {}, el('span', { text: `${s.user_agent || 'unknown client'} · since ${when(s.created_at)} · until ${when(s.expires_at)}` }), rev);
  }));
  $('token-list').replaceChildren(...tokens.tokens.map((t) => {
    const rev = el('button', { type: 'button', class: 'quiet', text: 'Revoke' });
    rev.addEventListener('click', () => call('DELETE', `/api/tokens/${id(t.id)}`).then(showSettings).catch(fail));
    return el('li', {}, el('span', { text: `${t.name || '(unnamed: made by the operator)'} · made ${when(t.created_at)} · last used ${when(t.last_used_at)}` }), rev);
  }));
}

$('resume').addEventListener('click', () => post('/api/sandbox/resume').then(showSettings).catch(fail));
$('notify-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  call('PUT', '/api/notify', { url: $('notify-url').value.trim() }).then(() => { say('saved'); showSettings(); }).catch(fail);
});
// The rule form: a condition needs a value (an empty one is refused here
// and by the agent, never sent as "no condition"), and a rule allowing every
// call of a tool a condition could narrow waits for a second, explicit yes.
const ruleForm = { conditions: {}, needsConfirm: [], pending: null };
const ruleError = (text) => { $('rule-error').textContent = text; };

// offerConditions enables only the conditions the chosen tool takes.
function offerConditions() {
  const takes = ruleForm.conditions[$('rule-tool').value];
  for (const o of $('rule-cond').options) o.disabled = o.value !== '' && Array.isArray(takes) && !takes.includes(o.value);
  if ($('rule-cond').selectedOptions[0]?.disabled) $('rule-cond').value = '';
  $('rule-value').disabled = $('rule-cond').value === '';
}

function hideRuleConfirm() {
  $('rule-confirm').hidden = true;
  ruleForm.pending = null;
}

function sendRule(rule) {
  post(`${agent}/rules`, rule).then(() => {
    $('rule-value').value = '';
    ruleError('');
    say('rule added');
    showSettings();
  }).catch((err) => ruleError(err.message));
}

for (const f of ['rule-tool', 'rule-effect', 'rule-cond', 'rule-value']) {
  $(f).addEventListener('input', () => { ruleError(''); hideRuleConfirm(); offerConditions(); });
}
$('rule-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  hideRuleConfirm();
  const rule = { tool: $('rule-tool').value, effect: $('rule-effect').value };
  const cond = $('rule-cond').value;
  if (cond) {
    const value = $('rule-value').value;
    if (!value.trim()) {
      ruleError(`Give the condition a value, or choose "always" for a rule on every ${rule.tool} call.`);
      $('rule-value').focus();
      return;
    }
    rule.when = { [cond]: value };
  }
  if (!cond && rule.effect === 'allow' && ruleForm.needsConfirm.includes(rule.tool)) {
    ruleError('');
    $('rule-confirm-text').textContent = `This rule lets your agent make every ${rule.tool} call without asking you, whatever it does. A condition would narrow it.`;
    $('rule-confirm-yes').textContent = `Allow every ${rule.tool} call`;
    ruleForm.pending = { ...rule, confirm_unconditional: true };
    $('rule-confirm').hidden = false;
    return;
  }
  sendRule(rule);
});
$('rule-confirm-yes').addEventListener('click', () => {
  const rule = ruleForm.pending;
  hideRuleConfirm();
  if (rule) sendRule(rule);
});
$('rule-confirm-no').addEventListener('click', hideRuleConfirm);
$('another-day').addEventListener('click', () => post('/api/spend/another-day').then(() => { say('today\'s limit is raised once'); showSettings(); }).catch(fail));
$('token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  post('/api/tokens', { name: $('token-name').value.trim() }).then((t) => {
    $('new-token').textContent = `Your new token (shown this once, copy it now): ${t.token}`;
    $('new-token').hidden = false;
    $('token-name').value = '';
    showSettings();
  }).catch(fail);
});
