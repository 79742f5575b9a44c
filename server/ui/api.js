// The API client of the page: the same API that kubectl reads, with the user's bearer
// token when the server asks for one. The token is kept in sessionStorage: it lasts as
// long as the tab, is seen by this origin only, and is sent only to this server.

const tokenKey = 'fleetwatch.token';

// Unauthorized is thrown when the server answers 401: without a token, or with one it
// refuses.
export class Unauthorized extends Error {
  constructor(refused) {
    super(refused ? 'The token was refused. Enter a valid bearer token.' : 'This server needs a bearer token.');
    this.refused = refused;
  }
}

// APIError is any other failed request, with the message of its Status.
export class APIError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export function token() {
  return sessionStorage.getItem(tokenKey) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(tokenKey, t);
  else sessionStorage.removeItem(tokenKey);
}

// request GETs path and returns the response, or throws Unauthorized or APIError.
export async function request(path, { accept = 'application/json', signal } = {}) {
  const headers = { Accept: accept };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const resp = await fetch(path, {
    headers, signal, credentials: 'omit', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer',
  });
  if (resp.status === 401) {
    await resp.body?.cancel();
    throw new Unauthorized(t !== '');
  }
  if (!resp.ok) {
    let message = `${resp.status} ${resp.statusText}`;
    try {
      const st = await resp.json();
      if (st && st.message) message = st.message;
    } catch { /* not a Status */ }
    throw new APIError(resp.status, message);
  }
  return resp;
}

export async function getJSON(path, opts) {
  return (await request(path, opts)).json();
}

// watch reads a watch stream: one JSON event a line, each given to onEvent, until the
// server ends it (it returns) or signal aborts (it throws an AbortError).
export async function watch(path, onEvent, opts) {
  const resp = await request(path, opts);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim() !== '') onEvent(JSON.parse(line));
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// The annotations that fleetwatch adds to the objects it serves.
export const clusterAnnotation = 'fleetwatch.io/cluster';
export const resourceVersionAnnotation = 'fleetwatch.io/resource-version';

// clusterOf returns the cluster of an object served by fleetwatch.
export function clusterOf(obj) {
  return obj?.metadata?.annotations?.[clusterAnnotation] || '';
}

// inCluster returns obj as its cluster holds it: a watch event's object carries a
// fleet cursor as its resourceVersion, and the cluster's own in an annotation.
export function inCluster(obj) {
  const ann = obj?.metadata?.annotations;
  if (!ann || !(resourceVersionAnnotation in ann)) return obj;
  const { [resourceVersionAnnotation]: rv, ...rest } = ann;
  return { ...obj, metadata: { ...obj.metadata, resourceVersion: rv, annotations: rest } };
}

// collectionPath is the path of a resource's collection in a cluster ('*' for all),
// in one namespace or all.
export function collectionPath(cluster, { group, version, resource, namespace }) {
  const e = encodeURIComponent;
  let p = `/clusters/${cluster === '*' ? '*' : e(cluster)}`;
  p += group ? `/apis/${e(group)}/${e(version)}` : `/api/${e(version)}`;
  if (namespace) p += `/namespaces/${e(namespace)}`;
  return `${p}/${e(resource)}`;
}
