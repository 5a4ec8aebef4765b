// push: notifications that reach a closed app. "Notify this device" asks
// the browser's permission, subscribes with the manager's VAPID key and
// gives the subscription to the manager (POST /api/push/subscriptions); it
// belongs to this session and ends with it (sign-out, revoke).
import { get, post, call } from './api.js';

const $ = (id) => document.getElementById(id);
const supported = () => 'serviceWorker' in navigator && 'PushManager' in window && typeof Notification !== 'undefined';

function keyBytes(b64url) {
  const b64 = b64url.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (b64url.length % 4)) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

async function registration() {
  return navigator.serviceWorker.register('/app/sw.js', { scope: '/app/' });
}

// showPush says whether this device gets notifications, and offers to
// turn them on or off.
export async function showPush() {
  const state = $('push-state');
  const button = $('push-toggle');
  if (!supported()) {
    state.textContent = 'This browser cannot receive notifications from a closed page; use an ntfy URL below.';
    button.hidden = true;
    return;
  }
  const reg = await registration();
  const sub = await reg.pushManager.getSubscription();
  if (Notification.permission === 'denied') {
    state.textContent = 'Notifications are blocked for this site in the browser\'s settings.';
    button.hidden = true;
    return;
  }
  // Given again on every visit: it binds the subscription to this session.
  if (sub) await post('/api/push/subscriptions', sub.toJSON()).catch(() => {});
  state.textContent = sub ? 'This device is notified of approvals, reminders and spend stops, even with the page closed.' : 'This device is not notified.';
  button.textContent = sub ? 'Stop notifying this device' : 'Notify this device';
  button.hidden = false;
  button.dataset.on = sub ? '1' : '';
}

async function toggle() {
  const button = $('push-toggle');
  button.disabled = true;
  try {
    const reg = await registration();
    const sub = await reg.pushManager.getSubscription();
    if (sub) {
      await call('DELETE', '/api/push/subscriptions', { endpoint: sub.endpoint }).catch(() => {});
      await sub.unsubscribe();
    } else {
      if (await Notification.requestPermission() !== 'granted') throw new Error('the browser did not allow notifications');
      const { public_key: key } = await get('/api/push/key');
      const fresh = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key) });
      await post('/api/push/subscriptions', fresh.toJSON());
    }
  } catch (err) {
    $('push-state').textContent = `Could not change notifications: ${err.message}`;
    button.disabled = false;
    return;
  }
  button.disabled = false;
  await showPush();
}

$('push-toggle').addEventListener('click', () => { toggle(); });
