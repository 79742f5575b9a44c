// The object view: an object's YAML, its changes as they arrive, and its copies in the
// other clusters (same resource, namespace and name) with the differences of what they
// ask for. One list and one watch of the collection across the fleet, selected by name,
// feed all of it. Secrets are read as metadata only (PartialObjectMetadata), so that a
// Secret's values never reach the page, even from a server that keeps them.

import { getJSON, watch, collectionPath, clusterOf, inCluster, APIError, Unauthorized } from './api.js';
import { diff, intent, change } from './diff.js';
import { h, setText, sleep, timeEl, viewURL } from './dom.js';
import { toYAML } from './yaml.js';

const maxChanges = 50;
const maxChangedFields = 30;

function show(v) {
  return v === undefined ? '(absent)' : v;
}

export async function objectView(main, params, signal) {
  const ref = Object.fromEntries(['cluster', 'group', 'version', 'resource', 'kind', 'namespace', 'name']
    .map((k) => [k, params.get(k) || '']));
  if (!ref.cluster || !ref.version || !ref.resource || !ref.name) throw new APIError(400, 'This link does not name an object.');
  const metadataOnly = ref.group === '' && ref.resource === 'secrets';
  const kind = ref.kind || ref.resource;
  const title = `${kind} ${ref.namespace ? `${ref.namespace}/` : ''}${ref.name}`;
  const sel = new URLSearchParams({ fieldSelector: `metadata.name=${ref.name}` });
  const path = collectionPath('*', ref);

  const yaml = h('pre', { id: 'yaml', tabindex: '0', 'aria-label': `YAML of ${title} in ${ref.cluster}` });
  const changes = h('ol', { id: 'changes', reversed: true });
  const watching = h('p', { id: 'watching' }, 'Connecting…');
  const others = h('tbody');
  const drift = h('section', { id: 'drift', 'aria-labelledby': 'drift-title', hidden: true });
  main.replaceChildren(
    h('h2', {}, title),
    h('p', {}, 'In cluster ', h('strong', { id: 'object-cluster' }, ref.cluster),
      metadataOnly ? ' (a Secret: its metadata only, never its values)' : ''),
    h('section', { 'aria-labelledby': 'others-title' },
      h('h3', { id: 'others-title' }, 'In other clusters'),
      h('table', { id: 'others' },
        h('caption', {}, `The same ${kind} (namespace and name) in the other clusters`),
        h('thead', {}, h('tr', {}, ['Cluster', 'Resource version', 'Differences', 'Compare'].map((t) => h('th', { scope: 'col' }, t)))),
        others)),
    drift,
    h('section', { 'aria-labelledby': 'yaml-title' }, h('h3', { id: 'yaml-title' }, 'YAML'), yaml),
    h('section', { 'aria-labelledby': 'changes-title' }, h('h3', { id: 'changes-title' }, 'Changes'), watching, changes));

  // copies holds the object of every cluster that has one, by cluster.
  let copies = new Map();
  let compared = '';

  const renderDrift = () => {
    if (!compared) return;
    const mine = copies.get(ref.cluster);
    const theirs = copies.get(compared);
    const d = diff(intent(mine), intent(theirs));
    drift.hidden = false;
    drift.replaceChildren(
      h('h3', { id: 'drift-title' }, `Differences between ${ref.cluster} and ${compared}`),
      d.length === 0
        ? h('p', { id: 'no-drift' }, theirs ? 'None: they ask for the same.' : `${compared} has no such object any more.`)
        : h('table', { id: 'diff' },
          h('caption', {}, `${d.length} ${d.length === 1 ? 'field differs' : 'fields differ'}`),
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Field'), h('th', { scope: 'col' }, ref.cluster), h('th', { scope: 'col' }, compared))),
          h('tbody', {}, d.map((x) => h('tr', {}, h('th', { scope: 'row' }, h('code', {}, x.path)),
            h('td', { class: 'mine' }, show(x.a)), h('td', { class: 'theirs' }, show(x.b)))))));
  };

  const renderOthers = () => {
    const mine = copies.get(ref.cluster);
    setText(yaml, mine ? toYAML(mine) : `Not in cluster ${ref.cluster} (deleted, or not cached).`);
    const rows = [...copies.entries()].filter(([c]) => c !== ref.cluster).sort(([a], [b]) => a.localeCompare(b));
    others.replaceChildren(...(rows.length ? rows.map(([c, obj]) => {
      const n = diff(intent(mine), intent(obj)).length;
      return h('tr', { 'data-cluster': c },
        h('th', { scope: 'row' }, h('a', { href: viewURL({ ...ref, view: 'object', cluster: c }) }, c)),
        h('td', {}, obj.metadata?.resourceVersion || ''),
        h('td', { class: n ? 'drift' : 'same' }, n ? `${n} ${n === 1 ? 'field differs' : 'fields differ'}` : 'identical'),
        h('td', {}, h('button', {
          type: 'button', 'aria-pressed': String(compared === c),
          onclick: () => { compared = c; renderOthers(); renderDrift(); document.getElementById('drift-title')?.scrollIntoView(); },
        }, `Compare with ${c}`)));
    }) : [h('tr', {}, h('td', { colspan: '4' }, 'No other cluster has it.'))]));
    if (compared && !copies.has(compared)) renderDrift();
  };

  const record = (type, before, after, rv) => {
    const fields = diff(change(before), change(after));
    const li = h('li', {},
      h('p', {}, h('strong', {}, type), ` at resourceVersion ${rv} `, timeEl(new Date().toISOString())),
      type === 'MODIFIED' && fields.length
        ? h('ul', {}, fields.slice(0, maxChangedFields).map((x) => h('li', {}, h('code', {}, x.path), `: ${show(x.a)} → ${show(x.b)}`)),
          fields.length > maxChangedFields ? h('li', {}, `and ${fields.length - maxChangedFields} more`) : null)
        : null);
    changes.prepend(li);
    while (changes.children.length > maxChanges) changes.lastElementChild.remove();
  };

  const listAccept = metadataOnly ? 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1' : 'application/json';
  const watchAccept = metadataOnly ? 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1' : 'application/json';
  while (!signal.aborted) {
    // List, then watch from the list's cursor; when the server ends the watch, go on
    // from the last cursor seen; when it has forgotten it (410 Gone), or a request
    // fails, list again.
    try {
      const list = await getJSON(`${path}?${sel}`, { signal, accept: listAccept });
      copies = new Map((list.items || []).map((o) => [clusterOf(o), o]));
      renderOthers();
      renderDrift();
      let rv = list.metadata?.resourceVersion || '';
      for (;;) {
        const w = new URLSearchParams(sel);
        w.set('watch', 'true');
        w.set('allowWatchBookmarks', 'true');
        if (rv) w.set('resourceVersion', rv);
        setText(watching, 'Watching for changes as they arrive.');
        await watch(`${path}?${w}`, (ev) => {
          const obj = ev.object;
          if (ev.type === 'ERROR') throw new APIError(obj?.code || 500, obj?.message || 'watch error');
          rv = obj?.metadata?.resourceVersion || rv;
          if (ev.type === 'BOOKMARK') return;
          const o = inCluster(obj);
          const c = clusterOf(o);
          const before = copies.get(c);
          if (ev.type === 'DELETED') copies.delete(c);
          else copies.set(c, o);
          if (c === ref.cluster) record(ev.type, before, ev.type === 'DELETED' ? undefined : o, o.metadata?.resourceVersion);
          renderOthers();
          renderDrift();
        }, { signal, accept: watchAccept });
      }
    } catch (e) {
      if (e instanceof Unauthorized || e.name === 'AbortError' || signal.aborted) throw e;
      setText(watching, `Reading the object failed (${e.message}); trying again.`);
      await sleep(1000, signal);
    }
  }
}
