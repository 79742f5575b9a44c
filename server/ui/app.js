// The page's entry point: it routes the URL's query to a view, and asks for a token when
// the server wants one. Every view runs until the next navigation aborts its signal.

import { Unauthorized, setToken, token } from './api.js';
import { changesView } from './changes.js';
import { h, setText, viewURL } from './dom.js';
import { fleetView } from './fleet.js';
import { objectView } from './object.js';
import { searchView } from './search.js';

const views = { fleet: fleetView, search: searchView, changes: changesView, object: objectView };

const main = document.getElementById('main');
const status = document.getElementById('status');
const query = document.getElementById('q');
const signOut = document.getElementById('sign-out');
let current = null;
// currentView is the name of the view shown: the search box filters the changes view,
// and searches from any other.
let currentView = '';

function askToken(err) {
  const input = h('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'off', required: true, 'aria-describedby': 'token-help' });
  main.replaceChildren(h('section', { 'aria-labelledby': 'sign-in-title' },
    h('h2', { id: 'sign-in-title' }, 'Sign in'),
    h('p', { id: 'token-message', role: 'alert', class: err.refused ? 'error' : '' }, err.message),
    h('form', {
      id: 'token-form',
      onsubmit: (e) => {
        e.preventDefault();
        setToken(input.value.trim());
        route();
      },
    },
    h('label', { for: 'token' }, 'Bearer token'),
    input,
    h('button', { type: 'submit' }, 'Sign in'),
    h('p', { id: 'token-help', class: 'help' },
      'A token of the server\'s token file, or one its home cluster accepts. It is kept in this tab only, until the tab closes.'))));
  input.focus();
}

async function route() {
  current?.abort();
  current = new AbortController();
  const { signal } = current;
  const params = new URLSearchParams(window.location.search);
  const name = params.get('view') || 'fleet';
  const view = views[name];
  currentView = name;
  query.value = name === 'search' || name === 'changes' ? params.get('q') || '' : '';
  signOut.hidden = token() === '';
  setText(status, '');
  document.querySelectorAll('nav a').forEach((a) => {
    if (a.id === `nav-${name}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  });
  if (!view) {
    main.replaceChildren(h('h2', {}, 'Not found'), h('p', {}, `There is no view "${name}".`));
    return;
  }
  try {
    await view(main, params, signal);
  } catch (e) {
    if (signal.aborted || e.name === 'AbortError') return;
    if (e instanceof Unauthorized) {
      setToken('');
      signOut.hidden = true;
      askToken(e);
      return;
    }
    main.replaceChildren(h('h2', {}, 'Error'), h('p', { id: 'error', role: 'alert' }, e.message));
  }
}

// navigate shows the view of url, as a new entry of the history.
function navigate(url) {
  window.history.pushState(null, '', url);
  route();
  main.focus({ preventScroll: true });
}

document.addEventListener('click', (e) => {
  const a = e.target.closest?.('a[href]');
  if (!a || a.getAttribute('href').startsWith('#') || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const url = new URL(a.href);
  if (url.origin !== window.location.origin || url.pathname !== '/') return;
  e.preventDefault();
  navigate(url.pathname + url.search);
});

document.getElementById('search-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const q = query.value.trim();
  if (currentView === 'changes') {
    const since = new URLSearchParams(window.location.search).get('since');
    navigate(viewURL({ view: 'changes', q, since }));
    return;
  }
  navigate(q ? `/?${new URLSearchParams({ view: 'search', q })}` : '/?view=search');
});

signOut.addEventListener('click', () => {
  setToken('');
  route();
});

window.addEventListener('popstate', route);
route();
