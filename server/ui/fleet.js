// The fleet view: every cluster the user may read, with its phase, server, objects per
// resource, last sync, last error and the snapshot's lag, read again every second
// (a watch of clusters.fleetwatch.io leaves the snapshot's lag out of its changes, since
// it changes all the time, and the page shows it live). Rows are updated in place, so that a refresh
// moves neither the focus nor the reader.

import { getJSON, Unauthorized } from './api.js';
import { h, setText, setChildren, sleep, timeEl, viewURL } from './dom.js';

const clustersPath = '/apis/fleetwatch.io/v1alpha1/clusters';
const interval = 1000;

function objects(st) {
  const resources = (st.resources || []).map((r) => h('li', {}, `${r.name}: ${r.count}`,
    r.state && r.state !== 'Synced' ? ` (${r.state})` : ''));
  return [h('span', { class: 'total' }, String(st.objects ?? 0)), resources.length ? h('ul', { class: 'counts' }, resources) : null];
}

function row(c) {
  const name = c.metadata.name;
  return h('tr', { 'data-cluster': name },
    h('th', { scope: 'row' }, h('a', { href: viewURL({ view: 'search', q: `cluster:${name}` }) }, name)),
    h('td', { class: 'phase' }),
    h('td', { class: 'server' }),
    h('td', { class: 'objects' }),
    h('td', { class: 'synced' }),
    h('td', { class: 'error' }),
    h('td', { class: 'lag' }));
}

function update(tr, c) {
  const st = c.status || {};
  const [phase, server, objs, synced, error, lag] = tr.querySelectorAll('td');
  setChildren(phase, h('span', { class: `phase-${st.phase || 'Unknown'}` }, st.phase || 'Unknown'),
    st.replica ? ` on ${st.replica}` : '');
  setText(server, st.server || '');
  setChildren(objs, objects(st));
  setChildren(synced, timeEl(st.lastSyncTime));
  setText(error, st.lastError || '');
  setText(lag, st.snapshotLag ?? 'no snapshot');
}

export async function fleetView(main, params, signal) {
  const tbody = h('tbody');
  const caption = h('caption', {}, 'Clusters');
  main.replaceChildren(
    h('h2', {}, 'Fleet'),
    h('table', { id: 'fleet' }, caption,
      h('thead', {}, h('tr', {},
        ['Cluster', 'Phase', 'Server', 'Objects', 'Last sync', 'Last error', 'Snapshot lag'].map((t) => h('th', { scope: 'col' }, t)))),
      tbody));
  const status = document.getElementById('status');
  while (!signal.aborted) {
    try {
      const list = await getJSON(clustersPath, { signal });
      const rows = new Map([...tbody.rows].map((tr) => [tr.dataset.cluster, tr]));
      const items = list.items || [];
      items.forEach((c, i) => {
        let tr = rows.get(c.metadata.name);
        if (!tr) tr = row(c);
        if (tbody.rows[i] !== tr) tbody.insertBefore(tr, tbody.rows[i] || null);
        update(tr, c);
        rows.delete(c.metadata.name);
      });
      for (const tr of rows.values()) tr.remove();
      // A sharded fleet's clusters watched by other replicas are neither synced here nor
      // behind: they are counted apart.
      const remote = items.filter((c) => c.status?.phase === 'Remote').length;
      const unready = items.filter((c) => !['Synced', 'Remote'].includes(c.status?.phase)).length;
      setText(caption, `${items.length} clusters, ${unready ? `${unready} not synced` : 'all synced'}` +
        `${remote ? `, ${remote} watched by other replicas` : ''}; updated every second`);
      setText(status, '');
    } catch (e) {
      if (e instanceof Unauthorized || e.name === 'AbortError') throw e;
      setText(status, `Reading the clusters failed: ${e.message}`);
    }
    await sleep(interval, signal);
  }
}
