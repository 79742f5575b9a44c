// DOM helpers. Nothing here parses HTML: every text, whatever a cluster's objects hold,
// goes into the page as text (and the Content-Security-Policy's Trusted Types forbid
// innerHTML and its kin anyway).

// h creates an element with attributes and children. An attribute named on* adds a
// listener; false, null and undefined leave an attribute out; children that are not
// Nodes become text.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

// setText sets an element's text, leaving it alone when it is the same, so that a live
// update does not disturb what the user reads or has selected.
export function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

// setChildren replaces an element's children only when they would read differently.
export function setChildren(el, ...children) {
  const next = document.createElement(el.tagName);
  append(next, children);
  if (next.innerHTML !== el.innerHTML) el.replaceChildren(...next.childNodes);
}

// age says how long ago an RFC 3339 time was, as kubectl's AGE column does.
export function age(ts, now = Date.now()) {
  if (!ts) return '';
  const t = Date.parse(ts);
  if (Number.isNaN(t)) return '';
  let s = Math.max(0, Math.floor((now - t) / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `${m}m`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs}h`;
  return `${Math.floor(hrs / 24)}d`;
}

// timeEl is a <time> element that shows an age and holds the exact time.
export function timeEl(ts) {
  if (!ts) return h('span', { class: 'none' }, 'never');
  return h('time', { datetime: ts, title: ts }, `${age(ts)} ago`);
}

// sleep waits ms, or until signal aborts.
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

// viewURL is the URL of a view of the page: its state is in the query, so that a link
// to it can be shared, and back and forward go through the views.
export function viewURL(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') p.set(k, v);
  const s = p.toString();
  return s ? `/?${s}` : '/';
}
