// The search view: one box, the search API of fleetwatch.io/v1alpha1, results in a table
// with a CLUSTER column, the counts per cluster and kind, and pages. The URL holds the
// query and the page, so that a search is a link.

import { getJSON } from './api.js';
import { h, setText, timeEl, viewURL } from './dom.js';

const searchPath = '/apis/fleetwatch.io/v1alpha1/search';
// defaultLimit is the number of results of a page, unless the URL says limit=N (at most
// the API's 500).
const defaultLimit = 50;

// objectURL is the link to an object's view.
export function objectURL(it) {
  return viewURL({
    view: 'object', cluster: it.cluster, group: it.group, version: it.version, resource: it.resource,
    kind: it.kind, namespace: it.namespace, name: it.name,
  });
}

function refine(q, term) {
  return viewURL({ view: 'search', q: q ? `${q} ${term}` : term });
}

function countsTable(id, title, header, counts, term) {
  const entries = Object.entries(counts || {}).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  return h('table', { id, class: 'counts' },
    h('caption', {}, title),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, header), h('th', { scope: 'col' }, 'Objects'))),
    h('tbody', {}, entries.map(([k, n]) => h('tr', {},
      h('th', { scope: 'row' }, h('a', { href: term(k), title: `Narrow the search to ${header.toLowerCase()} ${k}` }, k)),
      h('td', {}, String(n))))));
}

export async function searchView(main, params, signal) {
  const q = (params.get('q') || '').trim();
  const cont = params.get('continue') || '';
  const offset = Math.max(0, Number(params.get('offset')) || 0);
  const limit = Math.min(500, Math.max(1, Number(params.get('limit')) || defaultLimit));
  const pageLimit = limit === defaultLimit ? undefined : limit;
  main.replaceChildren(h('h2', {}, 'Search'));
  if (!q) {
    main.append(h('p', {}, 'Type a query in the search box: a word matches names, word* a name prefix; kind:, ns:, cluster:, label: and image: narrow it.'));
    return;
  }
  const status = document.getElementById('status');
  setText(status, 'Searching…');
  const u = new URLSearchParams({ q, limit: String(limit) });
  if (cont) u.set('continue', cont);
  const res = await getJSON(`${searchPath}?${u}`, { signal });
  setText(status, '');
  const items = res.items || [];
  const total = res.total ?? items.length;
  const first = items.length ? offset + 1 : 0;
  main.append(
    h('p', { id: 'summary' }, `${total} ${total === 1 ? 'object matches' : 'objects match'} `, h('q', {}, q), '.'),
    h('div', { class: 'facets' },
      countsTable('cluster-counts', 'Objects per cluster', 'Cluster', res.counts?.clusters, (c) => refine(q, `cluster:${c}`)),
      countsTable('kind-counts', 'Objects per kind', 'Kind', res.counts?.kinds, (k) => refine(q, `kind:${k}`))),
    h('table', { id: 'results' },
      h('caption', {}, items.length ? `Objects ${first} to ${offset + items.length} of ${total}` : 'No object matches'),
      h('thead', {}, h('tr', {}, ['Cluster', 'Kind', 'Namespace', 'Name', 'Images', 'Age'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, items.map((it) => h('tr', {},
        h('td', { class: 'cluster' }, it.cluster),
        h('td', {}, it.kind),
        h('td', {}, it.namespace || ''),
        h('th', { scope: 'row' }, h('a', { href: objectURL(it) }, it.name)),
        h('td', { class: 'images' }, (it.images || []).join(', ')),
        h('td', {}, timeEl(it.creationTimestamp)))))));
  const next = res.metadata?.continue;
  if (cont || next) {
    main.append(h('nav', { 'aria-label': 'Pages', class: 'pages' },
      cont ? h('a', { href: viewURL({ view: 'search', q, limit: pageLimit }) }, 'First page') : null,
      next ? h('a', { href: viewURL({ view: 'search', q, limit: pageLimit, continue: next, offset: offset + items.length }), rel: 'next' }, 'Next page') : null));
  }
}
