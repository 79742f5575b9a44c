// toYAML writes a JSON value as YAML, in kubectl's style (sequences at their key's
// indentation). Strings that YAML would read as something else are double-quoted, in
// JSON's syntax, which YAML reads too.

const plain = /^[A-Za-z_./][A-Za-z0-9_ ./:=@+-]*$/;
const special = /^(true|false|null|~|yes|no|on|off|y|n)$/i;
const numeric = /^[-+.]?\d|^[-+]?\.(inf|nan)$/i;

function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function isBlock(v) {
  return (Array.isArray(v) && v.length > 0) || (isObject(v) && Object.keys(v).length > 0);
}

function scalar(v) {
  if (v === null || v === undefined) return 'null';
  if (typeof v !== 'string') return String(v);
  if (!plain.test(v) || special.test(v) || numeric.test(v) || v.endsWith(' ') || v.includes(': ') || v.includes(' #') || v.endsWith(':')) {
    return JSON.stringify(v);
  }
  return v;
}

function inline(v, indent) {
  if (Array.isArray(v)) return '[]';
  if (isObject(v)) return '{}';
  if (typeof v === 'string' && v.includes('\n') && !/^\s/.test(v) && !/[^\S\n]\n/.test(v)) {
    const body = v.endsWith('\n') ? v.slice(0, -1) : v;
    const lines = body.split('\n').map((l) => (l === '' ? '' : indent + l));
    return `|${v.endsWith('\n') ? '' : '-'}\n${lines.join('\n')}`;
  }
  return scalar(v);
}

function emit(v, indent, out) {
  if (Array.isArray(v)) {
    for (const item of v) {
      if (isBlock(item) && !Array.isArray(item)) {
        const sub = [];
        emit(item, `${indent}  `, sub);
        sub[0] = `${indent}- ${sub[0].slice(indent.length + 2)}`;
        out.push(...sub);
      } else if (isBlock(item)) {
        out.push(`${indent}-`);
        emit(item, `${indent}  `, out);
      } else {
        out.push(`${indent}- ${inline(item, `${indent}  `)}`);
      }
    }
    return;
  }
  for (const [k, val] of Object.entries(v)) {
    const key = scalar(k);
    if (isBlock(val)) {
      out.push(`${indent}${key}:`);
      emit(val, Array.isArray(val) ? indent : `${indent}  `, out);
    } else {
      out.push(`${indent}${key}: ${inline(val, `${indent}  `)}`);
    }
  }
}

export function toYAML(value) {
  if (!isBlock(value)) return `${inline(value, '')}\n`;
  const out = [];
  emit(value, '', out);
  return `${out.join('\n')}\n`;
}
