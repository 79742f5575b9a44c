// The changes view: the fleet's timeline from its change log (the history API of
// fleetwatch.io/v1alpha1, docs/history.md), oldest first from a time, filtered by the
// search box's query, in pages. The URL holds the query, the time and the page, so that
// a timeline is a link. The last page follows the log: the changes that the log takes
// while it is shown join its end, until it is full.

import { APIError, Unauthorized, getJSON, request } from './api.js';
import { h, setText, sleep, viewURL } from './dom.js';
import { objectURL } from './search.js';

const changesPath = '/apis/fleetwatch.io/v1alpha1/changes';
const defaultLimit = 100;
// spans are the choices of how far back the timeline starts.
const spans = ['15m', '1h', '6h', '24h'];
const defaultSpan = '1h';
// followEvery is how often the last page asks the log for newer changes.
const followEvery = 2000;

// objectTypes are the changes of one object, which link to its view.
const objectTypes = new Set(['Added', 'Modified', 'Deleted', 'Vanished']);

// historyOff shows the server's reason when it keeps no change log.
export function historyOff(e) {
  return h('p', { id: 'history-off', role: 'note' }, e.message);
}

// notIncluded returns the text of the Warning headers (RFC 7234, as kube-apiserver and
// the server write them: 299 - "text") that name clusters an answer does not include,
// or '' if none does.
function notIncluded(header) {
  if (!header) return '';
  const texts = [];
  for (const m of header.matchAll(/299 - "((?:[^"\\]|\\.)*)"/g)) {
    const text = m[1].replace(/\\(.)/g, '$1');
    if (text.startsWith('clusters not included: ')) texts.push(text);
  }
  return texts.join('; ');
}

// changeRow is the timeline's row of a change.
function changeRow(c) {
  return h('tr', { 'data-seq': String(c.seq), 'data-replica': c.replica || null, class: `change-${c.type}` },
    h('td', {}, h('time', { datetime: c.time, title: c.time }, new Date(c.time).toLocaleString())),
    h('td', { class: 'type' }, c.type),
    h('td', { class: 'cluster' }, c.cluster),
    h('td', {}, c.kind || c.resource || ''),
    h('td', {}, c.namespace || ''),
    h('th', { scope: 'row' }, objectTypes.has(c.type) && c.name
      ? h('a', { href: objectURL({ ...c, kind: c.kind || c.resource }) }, c.name)
      : (c.name || '')),
    h('td', {}, c.objectResourceVersion || c.resourceVersion || ''));
}

function captionText(n) {
  return n ? `${n} ${n === 1 ? 'change' : 'changes'}, oldest first` : 'No change';
}

export async function changesView(main, params, signal) {
  const q = (params.get('q') || '').trim();
  const since = spans.includes(params.get('since')) ? params.get('since') : defaultSpan;
  const after = params.get('after') || '';
  const cont = params.get('continue') || '';
  const limit = Math.min(500, Math.max(1, Number(params.get('limit')) || defaultLimit));
  const pageLimit = limit === defaultLimit ? undefined : limit;
  main.replaceChildren(
    h('h2', {}, 'Changes'),
    h('p', { id: 'changes-scope' }, `Changes of the last ${since}`,
      q ? [' that match ', h('q', { id: 'changes-query' }, q)] : ' across the fleet',
      after ? ` after position ${after}` : '',
      '. The search box filters them with the search grammar.'),
    h('nav', { 'aria-label': 'How far back', class: 'spans' }, 'Since: ',
      spans.map((s) => h('a', { href: viewURL({ view: 'changes', q, since: s, limit: pageLimit }), 'aria-current': s === since && !after ? 'true' : null }, s))));
  const status = document.getElementById('status');
  setText(status, 'Reading the changes…');
  const query = (extra) => {
    const u = new URLSearchParams({ since, ...extra });
    if (q) u.set('q', q);
    return `${changesPath}?${u}`;
  };
  let res;
  let partial;
  try {
    const resp = await request(query({ limit: String(limit), ...(after ? { after } : {}), ...(cont ? { continue: cont } : {}) }), { signal });
    partial = notIncluded(resp.headers.get('Warning'));
    res = await resp.json();
  } catch (e) {
    setText(status, '');
    if (e instanceof APIError && e.code === 404) {
      main.append(historyOff(e));
      return;
    }
    throw e;
  }
  setText(status, '');
  // A replica of a sharded fleet that did not answer: the timeline is without its
  // clusters, and says so.
  if (partial) main.append(h('p', { id: 'changes-partial', role: 'note' }, partial));
  const items = res.items || [];
  const caption = h('caption', {}, captionText(items.length));
  const tbody = h('tbody', {}, items.map(changeRow));
  main.append(h('table', { id: 'timeline' },
    caption,
    h('thead', {}, h('tr', {}, ['Time', 'Change', 'Cluster', 'Kind', 'Namespace', 'Name', 'Resource version'].map((t) => h('th', { scope: 'col' }, t)))),
    tbody));
  const pages = h('nav', { 'aria-label': 'Pages', class: 'pages' },
    cont ? h('a', { href: viewURL({ view: 'changes', q, since, after, limit: pageLimit }) }, 'First page') : null);
  main.append(pages);
  const next = res.metadata?.continue;
  if (next) {
    pages.append(h('a', { href: viewURL({ view: 'changes', q, since, after, limit: pageLimit, continue: next }), rel: 'next' }, 'Next page'));
    return;
  }
  // The last page: follow the log from the position after it (none when it read no
  // change: the same query again) until the page is full, then link to the newer ones.
  const live = h('p', { id: 'changes-live', role: 'status' }, 'Following the change log: newer changes join the end of the table.');
  main.append(live);
  let rv = res.metadata?.resourceVersion || '';
  let shown = items.length;
  while (shown < limit) {
    await sleep(followEvery, signal);
    if (signal.aborted) return;
    let more;
    try {
      more = await getJSON(query({ limit: String(limit - shown), ...(rv ? { after: rv } : after ? { after } : {}) }), { signal });
    } catch (e) {
      if (e instanceof Unauthorized || e.name === 'AbortError' || signal.aborted) return;
      setText(live, `Following the change log failed (${e.message}); trying again.`);
      continue;
    }
    const fresh = more.items || [];
    tbody.append(...fresh.map(changeRow));
    shown += fresh.length;
    rv = more.metadata?.resourceVersion || rv;
    setText(caption, captionText(shown));
    setText(live, 'Following the change log: newer changes join the end of the table.');
    if (more.metadata?.continue) break;
  }
  setText(live, 'The page is full.');
  pages.append(h('a', { href: viewURL({ view: 'changes', q, since, after: rv, limit: pageLimit }), rel: 'next' }, 'Newer changes'));
}
