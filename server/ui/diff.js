// Field-level differences between objects: each leaf of an object is named by its path
// (spec.template.spec.containers[0].image) and compared by value.

function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function child(path, key) {
  if (/^[A-Za-z_$][\w$-]*$/.test(key)) return path ? `${path}.${key}` : key;
  return `${path}[${JSON.stringify(key)}]`;
}

// flatten maps the path of every leaf of v (empty objects and arrays included) to its
// value as JSON.
export function flatten(v, path = '', out = new Map()) {
  if (Array.isArray(v)) {
    if (v.length === 0) out.set(path, '[]');
    v.forEach((x, i) => flatten(x, `${path}[${i}]`, out));
  } else if (isObject(v)) {
    const keys = Object.keys(v);
    if (keys.length === 0 && path) out.set(path, '{}');
    for (const k of keys) flatten(v[k], child(path, k), out);
  } else {
    out.set(path, JSON.stringify(v));
  }
  return out;
}

// diff lists the paths whose values differ between a and b, in the order they come in
// a, then those only in b: [{path, a, b}], with undefined where a path is missing.
export function diff(a, b) {
  const fa = flatten(a);
  const fb = flatten(b);
  const out = [];
  for (const [p, v] of fa) if (fb.get(p) !== v) out.push({ path: p, a: v, b: fb.get(p) });
  for (const [p, v] of fb) if (!fa.has(p)) out.push({ path: p, a: undefined, b: v });
  return out;
}

// The annotations that say nothing about what an object asks for: fleetwatch's own and
// the manifest that client-side kubectl apply keeps.
const ignoredAnnotations = [/^fleetwatch\.io\//, /^kubectl\.kubernetes\.io\/last-applied-configuration$/];

// intent is what is compared between the copies of an object in several clusters: what
// it asks for (its spec, or its data), its labels and annotations; not the rest of its
// metadata nor its status, which differ in every cluster anyway.
export function intent(obj) {
  if (!obj) return {};
  const { apiVersion, kind, metadata = {}, status, ...rest } = obj;
  const annotations = Object.fromEntries(Object.entries(metadata.annotations || {})
    .filter(([k]) => !ignoredAnnotations.some((re) => re.test(k))));
  const meta = {};
  if (metadata.labels && Object.keys(metadata.labels).length) meta.labels = metadata.labels;
  if (Object.keys(annotations).length) meta.annotations = annotations;
  return Object.keys(meta).length ? { metadata: meta, ...rest } : rest;
}

// change is what is compared between two versions of an object in one cluster: all of
// it but the fields that change at every write.
export function change(obj) {
  if (!obj) return {};
  const { managedFields, resourceVersion, ...metadata } = obj.metadata || {};
  return { ...obj, metadata };
}
