// takeover: the live view of this agent's browser tab (#/browser). The
// owner sees the tab, sized to this screen (a picture fetched again as soon
// as the last one is shown, and at once after each input), taps it, types
// into it, presses keys, scrolls, goes back or opens an address. When the
// agent asked the owner to take over (browser_take_over), "Hand back"
// allows that call: that is the hand-back, and the agent goes on. What the
// owner types goes to the page, never to the agent.
import { agentName, agentPath, post, id as rid, APIError } from './api.js';

const $ = (id) => document.getElementById(id);
let live = null;     // the owner's stream (live.js): its lists of pending approvals
let running = false; // the picture loop runs
let kick = null;     // ends the loop's wait early
let shown = '';      // the object URL of the picture shown
let asked = null;    // the pending take-over of this agent, if any
let filled = 0;      // the take-over whose address was put in the address field
let site = '';       // the site of the picture shown: an input is for that site only

const onPage = () => !$('page-browser').hidden && document.visibilityState === 'visible';
const pause = (ms) => new Promise((resolve) => { kick = resolve; setTimeout(resolve, ms); });

// showBrowser opens the page: the pending take-over, then the picture loop.
export async function showBrowser(liveStream) {
  live = liveStream;
  await live.recount();
  showAsk();
  loop();
}

// loop fetches a picture of the tab after the one before is shown, while
// the page is in view.
async function loop() {
  if (running) return;
  running = true;
  let delay = 0;
  try {
    while (onPage()) {
      try {
        await picture();
        delay = 400;
      } catch (err) {
        if (err.status === 409 && err.problem && err.problem.type && err.problem.type.endsWith('/own-site')) {
          $('screen').hidden = true;
          site = '';
          $('screen-state').textContent = "The agent's tab is on this site, Affido itself: it is not shown. Sign in to Affido only in your own browser; open another address below.";
          delay = 3000;
        } else if (err.status === 409) {
          $('screen').hidden = true;
          site = '';
          $('screen-state').textContent = asked
            ? 'The agent has no page open: open the address it asked about below.'
            : 'The agent has no page open in its browser. Open an address below to look at one.';
          delay = 3000;
        } else {
          $('screen-state').textContent = `Could not show the tab (${err.message}); trying again…`;
          delay = Math.min(Math.max(delay * 2, 1000), 8000);
        }
      }
      showAsk();
      await pause(delay);
    }
  } finally {
    running = false;
    if (shown && !onPage()) { $('screen').removeAttribute('src'); URL.revokeObjectURL(shown); shown = ''; site = ''; }
  }
}
document.addEventListener('visibilitychange', () => { if (onPage()) loop(); });

// picture shows the tab as it is now, at this screen's size.
async function picture() {
  const img = $('screen');
  const w = Math.round(Math.min($('page-browser').clientWidth || 390, 1280));
  const h = Math.round(Math.min(Math.max(window.innerHeight - 240, 360), 1000));
  const q = new URLSearchParams({ agent: agentName, w: String(w), h: String(h), scale: String(Math.min(window.devicePixelRatio || 1, 2)) });
  let resp;
  try {
    resp = await fetch(`/api/browser/screen?${q}`, { credentials: 'same-origin' });
  } catch (err) {
    throw new APIError(0, { detail: `could not reach the server (${err.message})` });
  }
  if (resp.status === 401) { location.assign('/app/sign-in'); throw new APIError(401, { detail: 'signed out' }); }
  if (!resp.ok) {
    let problem = {};
    try { problem = await resp.json(); } catch { /* not JSON */ }
    throw new APIError(resp.status, problem);
  }
  const next = URL.createObjectURL(await resp.blob());
  await new Promise((resolve) => { img.onload = resolve; img.onerror = resolve; img.src = next; });
  if (shown) URL.revokeObjectURL(shown);
  shown = next;
  img.hidden = false;
  // The address is the tab's own, percent-encoded by the manager.
  const address = decodeURIComponent((resp.headers.get('Affido-Page-URL') || '').replace(/\+/g, ' '));
  try { site = new URL(address).host; } catch { site = ''; }
  showAddress(address);
  $('screen-state').textContent = `Live · ${new Date().toLocaleTimeString()}`;
}

// showAddress says which site the owner is looking at (and typing into).
function showAddress(raw) {
  let host = raw;
  let rest = '';
  try {
    const u = new URL(raw);
    host = `${u.protocol === 'https:' ? '' : `${u.protocol}//`}${u.host}`;
    rest = (u.pathname + u.search).slice(0, 120);
  } catch { /* not a URL: shown as it is */ }
  $('screen-host').textContent = host || 'no page';
  $('screen-path').textContent = rest;
}

// showAsk shows what the agent asked for, with the hand-back, while its
// take-over waits for the owner.
function showAsk() {
  const list = ((live && live.lists.get(agentName)) || []).filter((a) => a.tool === 'browser_take_over');
  // #/browser/<approval id>: the take-over whose card was opened.
  const wanted = Number(location.hash.split('/')[2]);
  asked = list.find((a) => a.id === wanted) || list[0] || null;
  $('hand-back').hidden = !asked;
  $('refuse-takeover').hidden = !asked;
  $('takeover-ask').hidden = !asked;
  if (!asked) return;
  let args = asked.arguments;
  try { if (typeof args === 'string') args = JSON.parse(args); } catch { args = {}; }
  const reason = String((args && args.reason) || '').slice(0, 300);
  const at = String((args && args.url) || '').slice(0, 2000);
  let where = '';
  try { where = new URL(at).host; } catch { /* no address */ }
  $('takeover-ask').textContent = `The agent asks you to take over${where ? ` on ${where}` : ''}: “${reason}”. When you are done, hand the tab back.`;
  if (filled !== asked.id && at) { $('screen-url').value = at; filled = asked.id; } // once: the owner may clear it
}

// send sends one input, then shows the tab at once.
async function send(input, what) {
  if (input.kind !== 'open' && !site) { $('screen-state').textContent = `${what}: no page is shown`; return false; }
  $('screen-state').textContent = `${what}…`;
  try {
    await post('/api/browser/input', { agent: agentName, host: site, ...input });
  } catch (err) {
    $('screen-state').textContent = `${what} failed: ${err.message}`;
    return false;
  }
  if (kick) kick();
  return true;
}

$('screen').addEventListener('click', (ev) => {
  const r = $('screen').getBoundingClientRect();
  if (!r.width || !r.height) return;
  const x = Math.min(Math.max((ev.clientX - r.left) / r.width, 0), 1);
  const y = Math.min(Math.max((ev.clientY - r.top) / r.height, 0), 1);
  send({ kind: 'tap', x, y }, 'Tapping');
});
$('screen-type').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const text = $('screen-text').value;
  if (!text) return;
  if (await send({ kind: 'text', text }, 'Typing')) $('screen-text').value = '';
});
for (const b of document.querySelectorAll('#page-browser [data-key]')) {
  b.addEventListener('click', () => send({ kind: 'key', key: b.dataset.key }, `Pressing ${b.dataset.key}`));
}
for (const b of document.querySelectorAll('#page-browser [data-scroll]')) {
  b.addEventListener('click', () => send({ kind: 'scroll', dy: Number(b.dataset.scroll) }, 'Scrolling'));
}
$('screen-back').addEventListener('click', () => send({ kind: 'back' }, 'Going back'));
$('screen-open').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const url = $('screen-url').value.trim();
  if (url) send({ kind: 'open', text: url }, `Opening ${url.slice(0, 80)}`);
});

// decideTakeOver allows (hands back) or denies the pending take-over, then
// returns to its conversation.
async function decideTakeOver(decision) {
  if (!asked) return;
  const a = asked;
  for (const b of [$('hand-back'), $('refuse-takeover')]) b.disabled = true;
  try {
    await post(`${agentPath(agentName)}/approvals/${rid(a.id)}`, { decision, wait: false });
    await live.recount();
    location.hash = `#/chat/${rid(a.conversation_id)}`;
  } catch (err) {
    $('screen-state').textContent = `Could not ${decision === 'deny' ? 'refuse' : 'hand back'}: ${err.message}`;
  } finally {
    for (const b of [$('hand-back'), $('refuse-takeover')]) b.disabled = false;
  }
}
$('hand-back').addEventListener('click', () => decideTakeOver('allow_once'));
$('refuse-takeover').addEventListener('click', () => decideTakeOver('deny'));
