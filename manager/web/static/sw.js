// sw: the client's service worker, for Web Push only (nothing is cached
// here: every page reads the store). A push is a notice from the manager,
// encrypted for this browser (RFC 8291); it shows as a notification, and a
// tap opens the client where the notice points (an approval, say).
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (ev) => ev.waitUntil(self.clients.claim()));

self.addEventListener('push', (ev) => {
  let n = {};
  try { n = ev.data ? ev.data.json() : {}; } catch { n = { body: ev.data ? ev.data.text() : '' }; }
  const title = String(n.title || 'Affido').slice(0, 120);
  const url = typeof n.url === 'string' && n.url.startsWith('/app/') ? n.url : '/app/';
  ev.waitUntil(self.registration.showNotification(title, {
    body: String(n.body || '').slice(0, 400),
    tag: n.kind ? `affido-${n.kind}` : undefined,
    data: { url },
  }));
});

self.addEventListener('notificationclick', (ev) => {
  ev.notification.close();
  const url = (ev.notification.data && ev.notification.data.url) || '/app/';
  ev.waitUntil((async () => {
    const open = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
    for (const c of open) {
      if (new URL(c.url).pathname.startsWith('/app/')) {
        await c.focus();
        return c.navigate(url);
      }
    }
    return self.clients.openWindow(url);
  })());
});
