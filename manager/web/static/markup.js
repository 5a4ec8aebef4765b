// markup: replies as markdown. The manager renders them (POST /api/render:
// goldmark, then bluemonday's allow-list), so no HTML the model wrote ever
// reaches the page as markup; this module is the one place that puts the
// manager's sanitized HTML into the page. The page's CSP runs no inline
// script or event handler either, should anything get through.
import { post } from './api.js';

const batch = { texts: [], waiters: [], timer: 0 };
const MaxBatch = 64; // what /api/render takes in one call

// markdown resolves to the sanitized HTML of text; calls made together go
// to the manager as one request.
export function markdown(text) {
  return new Promise((resolve, reject) => {
    batch.texts.push(text);
    batch.waiters.push({ resolve, reject });
    if (batch.texts.length >= MaxBatch) flush();
    else if (!batch.timer) batch.timer = setTimeout(flush, 0);
  });
}

function flush() {
  clearTimeout(batch.timer);
  batch.timer = 0;
  const texts = batch.texts.splice(0);
  const waiters = batch.waiters.splice(0);
  if (!texts.length) return;
  post('/api/render', { texts }).then((r) => {
    waiters.forEach((w, i) => (typeof r.html?.[i] === 'string' ? w.resolve(r.html[i]) : w.reject(new Error('no rendering'))));
  }, (err) => waiters.forEach((w) => w.reject(err)));
}

// showMarkdown replaces box's text with its rendering; on failure the text
// stays as it is (plain, and still readable).
export async function showMarkdown(box, text) {
  let html;
  try { html = await markdown(text); } catch { return; }
  const t = document.createElement('template');
  t.innerHTML = html; // sanitized by the manager; see the top of this file
  box.replaceChildren(t.content);
  box.classList.add('md');
  for (const pre of box.querySelectorAll('pre')) {
    const copy = document.createElement('button');
    copy.type = 'button';
    copy.className = 'quiet copy';
    copy.textContent = 'Copy';
    copy.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(pre.textContent);
        copy.textContent = 'Copied';
      } catch {
        copy.textContent = 'Copy failed';
      }
      setTimeout(() => { copy.textContent = 'Copy'; }, 1500);
    });
    const wrap = document.createElement('div');
    wrap.className = 'code-box';
    pre.replaceWith(wrap);
    wrap.append(pre, copy);
  }
}
