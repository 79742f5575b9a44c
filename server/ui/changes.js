// The changes view: the fleet's timeline from its change log (the history API of
// fleetwatch.io/v1alpha1, docs/history.md), oldest first from a time, filtered by the
// search box's query, in pages. The URL holds the query, the time and the page, so that
// a timeline is a link.

import { APIError, request } from './api.js';
import { h, setText, viewURL } from './dom.js';
import { objectURL } from './search.js';

const changesPath = '/apis/fleetwatch.io/v1alpha1/changes';
const defaultLimit = 100;
// spans are the choices of how far back the timeline starts.
const spans = ['15m', '1h', '6h', '24h'];
const defaultSpan = '1h';

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

export async function changesView(main, params, signal) {
  const q = (params.get('q') || '').trim();
  const since = spans.includes(params.get('since')) ? params.get('since') : defaultSpan;
  const cont = params.get('continue') || '';
  const limit = Math.min(500, Math.max(1, Number(params.get('limit')) || defaultLimit));
  const pageLimit = limit === defaultLimit ? undefined : limit;
  main.replaceChildren(
    h('h2', {}, 'Changes'),
    h('p', { id: 'changes-scope' }, `Changes of the last ${since}`,
      q ? [' that match ', h('q', { id: 'changes-query' }, q)] : ' across the fleet',
      '. The search box filters them with the search grammar.'),
    h('nav', { 'aria-label': 'How far back', class: 'spans' }, 'Since: ',
      spans.map((s) => h('a', { href: viewURL({ view: 'changes', q, since: s, limit: pageLimit }), 'aria-current': s === since ? 'true' : null }, s))));
  const status = document.getElementById('status');
  setText(status, 'Reading the changes…');
  const u = new URLSearchParams({ since, limit: String(limit) });
  if (q) u.set('q', q);
  if (cont) u.set('continue', cont);
  let res;
  let partial;
  try {
    const resp = await request(`${changesPath}?${u}`, { signal });
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
  main.append(h('table', { id: 'timeline' },
    h('caption', {}, items.length ? `${items.length} ${items.length === 1 ? 'change' : 'changes'}, oldest first` : 'No change'),
    h('thead', {}, h('tr', {}, ['Time', 'Change', 'Cluster', 'Kind', 'Namespace', 'Name', 'Resource version'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, items.map((c) => h('tr', { 'data-seq': String(c.seq), 'data-replica': c.replica || null, class: `change-${c.type}` },
      h('td', {}, h('time', { datetime: c.time, title: c.time }, new Date(c.time).toLocaleString())),
      h('td', { class: 'type' }, c.type),
      h('td', { class: 'cluster' }, c.cluster),
      h('td', {}, c.kind || c.resource || ''),
      h('td', {}, c.namespace || ''),
      h('th', { scope: 'row' }, objectTypes.has(c.type) && c.name
        ? h('a', { href: objectURL({ ...c, kind: c.kind || c.resource }) }, c.name)
        : (c.name || '')),
      h('td', {}, c.objectResourceVersion || c.resourceVersion || ''))))));
  const next = res.metadata?.continue;
  if (cont || next) {
    main.append(h('nav', { 'aria-label': 'Pages', class: 'pages' },
      cont ? h('a', { href: viewURL({ view: 'changes', q, since, limit: pageLimit }) }, 'First page') : null,
      next ? h('a', { href: viewURL({ view: 'changes', q, since, limit: pageLimit, continue: next }), rel: 'next' }, 'Next page') : null));
  }
}
