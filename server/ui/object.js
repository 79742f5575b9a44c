// The object view: an object's YAML, its changes as they arrive, and its copies in the
// other clusters (same resource, namespace and name) with the differences of what they
// ask for. One list and one watch of the collection across the fleet, selected by name,
// feed all of it. Secrets are read as metadata only (PartialObjectMetadata), so that a
// Secret's values never reach the page, even from a server that keeps them.

import { getJSON, watch, collectionPath, clusterOf, inCluster, resourceVersionAnnotation, APIError, Unauthorized } from './api.js';
import { historyOff } from './changes.js';
import { diff, intent, change } from './diff.js';
import { h, setText, sleep, timeEl, viewURL } from './dom.js';
import { toYAML } from './yaml.js';

const maxChanges = 50;
const maxChangedFields = 30;
// maxHistoryPages bounds the pages of an object's history that the view reads.
const maxHistoryPages = 10;
// maxHistoryBehind bounds how many times in a row the view reads the history again, a
// second apart, while the change log lacks the object's last change (the snapshot
// commits it a moment after the watch sent it).
const maxHistoryBehind = 15;
const maxHistoryFields = 100;

// rvNumber returns a cluster's resourceVersion rv as a BigInt, or undefined.
function rvNumber(rv) {
  return /^[0-9]+$/.test(rv || '') ? BigInt(rv) : undefined;
}

// ownResourceVersion returns the resourceVersion of obj in its cluster, as rvNumber.
function ownResourceVersion(obj) {
  return rvNumber(obj?.metadata?.annotations?.[resourceVersionAnnotation] || obj?.metadata?.resourceVersion);
}

function show(v) {
  return v === undefined ? '(absent)' : v;
}

// value shows a value of the history's field diffs.
function value(v) {
  if (v === undefined) return '(absent)';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

// historyPath is the path of the history of the object ref (docs/history.md).
function historyPath(ref) {
  const p = new URLSearchParams({ group: ref.group, version: ref.version, resource: ref.resource, namespace: ref.namespace, name: ref.name, limit: '500' });
  return `/clusters/${encodeURIComponent(ref.cluster)}/apis/fleetwatch.io/v1alpha1/history?${p}`;
}

// historyStep is one step of an object's history with the fields it changed.
function historyStep(st) {
  const fields = st.fields || [];
  return h('li', { 'data-seq': String(st.seq) },
    h('p', {}, h('strong', {}, st.type), st.objectResourceVersion ? ` at resourceVersion ${st.objectResourceVersion} ` : ' ',
      h('time', { datetime: st.time, title: st.time }, new Date(st.time).toLocaleString())),
    st.baseMissing ? h('p', { class: 'help' }, 'What it changed is not known: the step before is no longer in the log.') : null,
    fields.length ? h('table', {},
      h('caption', {}, `${fields.length} ${fields.length === 1 ? 'field' : 'fields'} ${st.type === 'Added' ? 'set' : 'changed'}`),
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Field'), h('th', { scope: 'col' }, 'Before'), h('th', { scope: 'col' }, 'After'))),
      h('tbody', {}, fields.slice(0, maxHistoryFields).map((f) => h('tr', {},
        h('th', { scope: 'row' }, h('code', {}, f.path)), h('td', { class: 'old' }, value(f.old)), h('td', { class: 'new' }, value(f.new)))),
      fields.length > maxHistoryFields ? h('tr', {}, h('td', { colspan: '3' }, `and ${fields.length - maxHistoryFields} more`)) : null)) : null);
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
  const history = h('ol', { id: 'history', reversed: true });
  const historyState = h('p', { id: 'history-state' }, 'Its changes as the snapshot\'s change log holds them, with the fields each one changed.');
  // The history is read when asked for: a daemon without a change log answers 404, a
  // token that may not read the cluster 403, and neither should cost a request (nor a
  // console error) to every object view.
  let historyShown = false;
  const showHistory = h('button', {
    type: 'button', id: 'show-history', 'aria-controls': 'history', 'aria-expanded': 'false',
    onclick: () => {
      historyShown = true;
      showHistory.setAttribute('aria-expanded', 'true');
      showHistory.hidden = true;
      setText(historyState, 'Reading the history…');
      loadHistory();
    },
  }, 'Show its history');
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
    h('section', { 'aria-labelledby': 'changes-title' }, h('h3', { id: 'changes-title' }, 'Changes'), watching, changes),
    h('section', { 'aria-labelledby': 'history-title' }, h('h3', { id: 'history-title' }, 'History'), historyState, showHistory, history));

  // The history, newest step first, read again after a change of this cluster's object
  // once shown (the log has it once the snapshot committed it).
  let historyTimer = 0;
  let historyBehind = 0;
  const loadHistory = async () => {
    try {
      const steps = [];
      let cont = '';
      for (let i = 0; i < maxHistoryPages; i++) {
        const res = await getJSON(historyPath(ref) + (cont ? `&continue=${encodeURIComponent(cont)}` : ''), { signal });
        steps.push(...(res.items || []));
        cont = res.metadata?.continue || '';
        if (!cont) break;
      }
      setText(historyState, steps.length
        ? `${steps.length} ${steps.length === 1 ? 'step' : 'steps'} in the change log${cont ? ' (the oldest shown; there are more)' : ''}, newest first.`
        : 'The change log holds no change of it.');
      const newest = cont ? undefined : rvNumber(steps.at(-1)?.objectResourceVersion);
      history.replaceChildren(...steps.reverse().map(historyStep));
      // The object changed after the log's newest step of it: the snapshot has not
      // committed that change yet (or had not when the page listed the object). Read
      // the log again shortly, as after a change that the watch sends.
      const own = ownResourceVersion(copies.get(ref.cluster));
      if (!cont && own !== undefined && (newest === undefined || newest < own) && historyBehind < maxHistoryBehind) {
        historyBehind++;
        reloadHistory();
      } else {
        historyBehind = 0;
      }
    } catch (e) {
      if (e instanceof Unauthorized || e.name === 'AbortError' || signal.aborted) return;
      if (e instanceof APIError && e.code === 404) historyState.replaceWith(historyOff(e));
      else setText(historyState, `Reading the history failed (${e.message}).`);
    }
  };
  const reloadHistory = () => {
    if (!historyShown) return;
    clearTimeout(historyTimer);
    historyTimer = setTimeout(loadHistory, 1000);
  };
  signal.addEventListener('abort', () => clearTimeout(historyTimer), { once: true });

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
          if (c === ref.cluster) {
            record(ev.type, before, ev.type === 'DELETED' ? undefined : o, o.metadata?.resourceVersion);
            reloadHistory();
          }
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
