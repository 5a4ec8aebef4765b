// The sign-in page: POST /auth/sign-in (or /auth/sign-up with an invite),
// the same calls curl makes; the manager sets the session cookie.
const form = document.getElementById('sign-in');
const error = document.getElementById('error');
const invite = document.querySelector('.invite');
document.getElementById('toggle').addEventListener('click', () => {
  invite.hidden = !invite.hidden;
  document.getElementById('submit').textContent = invite.hidden ? 'Sign in' : 'Create my account';
});
form.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  error.textContent = '';
  const body = { user: form.user.value.trim(), password: form.password.value };
  let path = '/auth/sign-in';
  if (!invite.hidden) { body.invite = form.invite.value.trim(); path = '/auth/sign-up'; }
  const resp = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), credentials: 'same-origin' });
  if (resp.ok) { location.assign('/app/'); return; }
  // A 429 says which: this account is locked for a while, or this address tried too often.
  let detail = resp.status === 429 ? 'Too many tries; wait a moment.' : resp.statusText;
  try { const p = await resp.json(); detail = p.detail || p.title || detail; } catch { /* not JSON */ }
  error.textContent = detail;
});
