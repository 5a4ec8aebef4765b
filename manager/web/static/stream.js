// stream: one event stream per tab from the agent (/u/<user>/events). It
// only says what changed: each event is a stored entry, with its id as the
// event id. EventSource retries by itself after a dropped connection but
// gives up after an answer that is not 200 (a 502 while the manager
// restarts), so this reconnects by itself with backoff, from the last id
// it saw, and says so on the page.
import { agent } from './api.js';

export class Stream {
  constructor({ onEntry, onDelta, onState }) {
    this.onEntry = onEntry;
    this.onDelta = onDelta;
    this.onState = onState;
    this.last = 0;
    this.conversation = 0;
    this.delay = 500;
    this.es = null;
    this.timer = 0;
  }

  open(conversation, after) {
    this.close();
    this.conversation = conversation;
    this.last = after || 0;
    this.connect();
  }

  connect() {
    clearTimeout(this.timer);
    this.onState(this.es ? 'reconnecting' : 'connecting');
    const es = new EventSource(`${agent}/events?conversation=${Number(this.conversation)}&after=${Number(this.last)}`);
    this.es = es;
    es.addEventListener('hello', () => { this.delay = 500; this.onState('live'); });
    es.addEventListener('entry', (ev) => {
      const id = Number(ev.lastEventId);
      if (id > this.last) this.last = id;
      this.onEntry(JSON.parse(ev.data));
    });
    es.addEventListener('delta', (ev) => this.onDelta(JSON.parse(ev.data)));
    es.addEventListener('error', () => {
      if (es !== this.es) return;
      if (es.readyState === EventSource.CLOSED) { // gave up: reconnect ourselves
        this.onState('reconnecting');
        this.timer = setTimeout(() => this.connect(), this.delay);
        this.delay = Math.min(this.delay * 2, 15000);
      } else {
        this.onState('reconnecting');
      }
    });
  }

  close() {
    clearTimeout(this.timer);
    if (this.es) { this.es.close(); this.es = null; }
  }
}
