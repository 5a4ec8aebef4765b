// live: the owner's own stream from the manager (/api/events), across all
// agents: an approval waiting, a reminder fired, a spend stop. A notice is
// a hint to read the stores again: the count of waiting approvals is
// always read from each agent's store, never counted from notices. While
// the page is hidden a notice also shows as a system notification (when
// the owner allowed them); a closed page is reached by Web Push (push.js).
import { sandbox, agentPath, get } from './api.js';

export class Live {
  constructor({ onApprovals, onNotice }) {
    this.onApprovals = onApprovals;
    this.onNotice = onNotice;
    this.lists = new Map(); // agent -> its pending approvals
    this.delay = 500;
    this.es = null;
    this.timer = 0;
    this.recounting = null;
  }

  open() {
    this.close();
    const es = new EventSource('/api/events');
    this.es = es;
    es.addEventListener('hello', () => { this.delay = 500; this.recount(); });
    es.addEventListener('notice', (ev) => {
      let n = {};
      try { n = JSON.parse(ev.data); } catch { return; }
      this.recount();
      this.onNotice(n);
      this.tell(n);
    });
    es.addEventListener('error', () => {
      if (es !== this.es || es.readyState !== EventSource.CLOSED) return;
      this.timer = setTimeout(() => this.open(), this.delay);
      this.delay = Math.min(this.delay * 2, 15000);
    });
  }

  close() {
    clearTimeout(this.timer);
    if (this.es) { this.es.close(); this.es = null; }
  }

  // recount reads every agent's pending approvals (one sandbox holds them
  // all; a page that is open keeps it awake anyway) and hands them to
  // onApprovals as a Map of agent name to its pending approvals.
  recount() {
    if (this.recounting) { // a notice during a count: count once more after it
      this.again = true;
      return this.recounting;
    }
    this.again = false;
    this.recounting = (async () => {
      try {
        const { agents } = await get(`${sandbox}/agents`);
        const names = (agents || []).map((a) => a.name);
        if (!names.includes('main')) names.unshift('main');
        const lists = await Promise.all(names.map((n) => get(`${agentPath(n)}/approvals`)
          .then((r) => r.approvals || []).catch(() => this.lists.get(n) || [])));
        this.lists = new Map(names.map((n, i) => [n, lists[i]]));
        this.onApprovals(this.lists);
      } catch { /* the next notice or reconnect counts again */ } finally {
        this.recounting = null;
        if (this.again) this.recount();
      }
    })();
    return this.recounting;
  }

  // tell shows a notice as a system notification while the page is not
  // looked at (the Notification API; Web Push covers a closed page).
  tell(n) {
    if (document.visibilityState === 'visible' || typeof Notification === 'undefined' || Notification.permission !== 'granted') return;
    const title = { approval: 'An approval waits for you', reminder: 'Reminder', spend: 'Your agent stopped', job: 'A job finished', connector: "A connector's tool was turned off" }[n.kind] || 'Affido';
    try { new Notification(title, { body: String(n.text || '').slice(0, 300), tag: `affido-${n.kind}` }); } catch { /* some browsers only notify from a service worker */ }
  }
}
