// Cellpay operator console. No framework, nothing from elsewhere; every
// call carries the X-Cellpay-Console header the server requires against
// cross-site requests. The page never sees an operator token after login:
// the session is a cookie the script cannot read.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const CELLS_EVERY = 2000, LOGS_EVERY = 5000;
  let me = null;        // the session: operator, role, may
  let pending = null;   // the previewed change, sent on Confirm
  let timers = [];

  async function api(method, path, body) {
    const init = { method, credentials: 'same-origin', cache: 'no-store',
      headers: { 'X-Cellpay-Console': '1', 'Accept': 'application/json' } };
    if (method === 'POST') {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body === undefined ? {} : body);
    }
    const res = await fetch(path, init);
    let data = {};
    if (res.status !== 204) data = await res.json().catch(() => ({}));
    if (res.status === 401 && path !== '/api/login') { loggedOut(data.error || 'session ended'); }
    if (!res.ok) {
      const err = new Error(data.error || ('HTTP ' + res.status));
      err.status = res.status;
      throw err;
    }
    return data;
  }

  function say(text) { $('status').textContent = text; }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function pct(x) { return (100 * x).toFixed(1) + '%'; }
  function time(t) { return new Date(t).toLocaleTimeString(); }

  // --- session ---

  function loggedIn(s) {
    me = s;
    $('login').hidden = true;
    $('app').hidden = false;
    $('who').hidden = false;
    $('who-text').textContent = s.operator + ' (' + s.role + ')';
    const may = s.may.Drain || s.may.Restore || s.may.SetWeight;
    $('change').hidden = !may;
    $('change-denied').hidden = may;
    $('change-denied').textContent = may ? '' :
      'Role ' + s.role + ' may read but not change weights; an operator may.';
    for (const opt of $('action').options) {
      opt.disabled = !s.may[{ drain: 'Drain', restore: 'Restore', weight: 'SetWeight' }[opt.value]];
    }
    clearPreview();
    stopPolling();
    poll(refreshCells, CELLS_EVERY);
    poll(refreshLogs, LOGS_EVERY);
  }

  function loggedOut(why) {
    me = null;
    stopPolling();
    clearTxn();
    $('app').hidden = true;
    $('who').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = why || '';
    $('token').focus();
  }

  // poll runs fn now and then every ms after it ends: never two at once.
  function poll(fn, ms) {
    const slot = { t: 0, stopped: false };
    const run = async () => {
      try { await fn(); } catch (e) { say(e.message); }
      if (!slot.stopped) slot.t = setTimeout(run, ms);
    };
    timers.push(slot);
    run();
  }

  function stopPolling() {
    for (const s of timers) { s.stopped = true; clearTimeout(s.t); }
    timers = [];
  }

  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = $('token');
    const token = input.value;
    input.value = '';
    $('login-error').textContent = '';
    try {
      loggedIn(await api('POST', '/api/login', { token }));
      say('Logged in');
    } catch (e) {
      $('login-error').textContent = e.message;
      input.focus();
    }
  });

  $('logout').addEventListener('click', async () => {
    try {
      await api('POST', '/api/logout');
      loggedOut('Logged out');
    } catch (e) {
      say('Log out failed: ' + e.message);
    }
  });

  // --- cells ---

  async function refreshCells() {
    const d = await api('GET', '/api/cells');
    $('table-meta').textContent = 'Table version ' + d.table_version + ' · replica ' + (d.replica || '-') +
      ' · config store ' + d.config_store + ' · updated ' + new Date().toLocaleTimeString();
    $('cells').querySelectorAll('tbody').forEach((tb) => tb.remove());
    $('cells').append(...siteGroups(d.cells));
    const sel = $('cell'), keep = sel.value;
    const ids = d.cells.map((c) => c.id);
    if (sel.options.length !== ids.length || ids.some((id, i) => sel.options[i].value !== id)) {
      sel.replaceChildren(...ids.map((id) => { const o = el('option', id); o.value = id; return o; }));
      if (ids.includes(keep)) sel.value = keep;
    }
  }

  // siteGroups is a tbody per site, headed by its name, in the server's
  // order (by site, then cell); a table that names no site is one group
  // without a heading.
  function siteGroups(cells) {
    const named = cells.some((c) => c.site);
    const groups = [];
    for (const c of cells) {
      let g = groups[groups.length - 1];
      if (!g || g.dataset.site !== c.site) {
        g = el('tbody');
        g.dataset.site = c.site;
        if (named) {
          const tr = el('tr', null, 'site');
          const n = cells.filter((x) => x.site === c.site).length;
          const th = el('th', (c.site ? 'Site ' + c.site : 'No site named') + ' · ' + n + (n === 1 ? ' cell' : ' cells'));
          th.scope = 'rowgroup';
          th.colSpan = 10;
          tr.append(th);
          g.append(tr);
        }
        groups.push(g);
      }
      g.append(cellRow(c));
    }
    return groups;
  }

  function cellRow(c) {
    const tr = el('tr');
    tr.dataset.cell = c.id;
    tr.append(el('th', c.id));
    tr.firstChild.scope = 'row';
    tr.append(el('td', c.pool + (c.balancer && c.balancer !== 'round_robin' ? ' (' + c.balancer + ')' : '')));
    const h = c.health === 'up' && c.health_share < 100 ? 'up ' + c.health_share + '%' : c.health;
    const health = el('td', h, 'health ' + c.health);
    if (c.replicas && c.replicas.length) {
      // Every replica's own verdict: one that judges otherwise shows here.
      const upOn = c.replicas.filter((r) => r.health_share > 0).length;
      const rs = el('div', upOn + '/' + c.replicas.length + ' replicas up', 'help');
      rs.title = c.replicas.map((r) => r.replica + (r.site ? ' (' + r.site + ')' : '') + ': ' + r.health_share + '%, ' +
        r.in_flight + ' in flight').join('\n');
      health.append(rs);
    }
    tr.append(health);
    const inst = el('td');
    const up = c.instances.filter((i) => i.health === 'up').length;
    inst.append(el('span', up + '/' + c.instances.length + ' up'));
    const ul = el('ul', null, 'inst');
    for (const i of c.instances) {
      ul.append(el('li', i.addr + ': ' + i.health + (i.detail ? ' (' + i.detail + ')' : ''), i.health));
    }
    inst.append(ul);
    tr.append(inst);
    tr.append(el('td', c.weight + ' / ' + c.target_weight + ' / ' + c.table_weight, 'num weight'));
    const share = el('td', null, 'num share');
    const m = el('meter');
    m.min = 0; m.max = 1; m.value = c.share;
    m.setAttribute('aria-hidden', 'true');
    share.append(el('span', pct(c.share), 'share-text'), ' ', m);
    tr.append(share);
    tr.append(el('td', c.in_flight, 'num inflight'));
    tr.append(el('td', c.success_rate < 0 ? '-' : pct(c.success_rate) + ' of ' + c.recent_requests, 'num'));
    tr.append(el('td', c.refdata_version ? 'v' + c.refdata_version : '-', 'refdata'));
    tr.append(el('td', c.ramp ? c.ramp.from + ' → ' + c.ramp.to + ' until ' + time(c.ramp.end) : '-'));
    return tr;
  }

  // --- drain, restore, weight ---

  function request() {
    const action = $('action').value;
    const r = { cell: $('cell').value, action, over: $('over').value.trim() };
    const n = parseInt($('amount').value, 10);
    if (action === 'drain') r.percent = n;
    if (action === 'weight') r.weight = n;
    return r;
  }

  function clearPreview() {
    pending = null;
    $('confirm').disabled = true;
    $('cancel').disabled = true;
    $('preview-text').textContent = '';
  }

  function actionChanged() {
    const a = $('action').value;
    $('amount-row').hidden = a === 'restore';
    $('amount').required = a !== 'restore';
    $('amount-label').textContent = a === 'weight' ? 'Weight (0 to 100)' : 'Percent to drain';
    clearPreview();
  }

  $('action').addEventListener('change', actionChanged);
  for (const id of ['cell', 'amount', 'over']) $(id).addEventListener('input', clearPreview);

  $('change').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearPreview();
    const r = request();
    try {
      const p = await api('POST', '/api/preview', r);
      pending = r;
      $('preview-text').textContent = p.text;
      $('confirm').disabled = false;
      $('cancel').disabled = false;
      $('confirm').focus();
    } catch (e) {
      $('preview-text').textContent = e.message;
    }
  });

  $('cancel').addEventListener('click', () => { clearPreview(); $('preview').focus(); });

  $('confirm').addEventListener('click', async () => {
    if (!pending) return;
    const r = pending;
    clearPreview();
    try {
      const c = await api('POST', '/api/change', r);
      say(r.action + ' ' + c.cell + ': weight ' + c.weight + (c.target_weight !== c.weight ? ', ramping to ' + c.target_weight : ''));
      await refreshCells();
      await refreshLogs();
    } catch (e) {
      $('preview-text').textContent = e.message;
    }
    $('preview').focus();
  });

  // --- find a transaction ---

  function clearTxn() {
    $('txn').hidden = true;
    $('txn').tBodies[0].replaceChildren();
    $('txn-summary').textContent = '';
    $('txn-error').textContent = '';
  }

  $('txn-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearTxn();
    const q = new URLSearchParams({ partner: $('txn-partner').value.trim(), id: $('txn-id').value.trim() });
    $('txn-find').disabled = true;
    $('txn-summary').textContent = 'Asking every cell…';
    try {
      const t = await api('GET', '/api/txn?' + q);
      $('txn-summary').textContent = t.partner + ' / ' + t.id + ': ' + t.summary + '.';
      $('txn').tBodies[0].replaceChildren(...t.cells.map(txnRow));
      $('txn').hidden = false;
    } catch (e) {
      $('txn-summary').textContent = '';
      $('txn-error').textContent = e.message;
    }
    $('txn-find').disabled = false;
  });

  // txnRow is one cell's answer: its record, or why it has none.
  function txnRow(c) {
    const tr = el('tr');
    tr.dataset.cell = c.cell;
    const th = el('th', c.cell);
    th.scope = 'row';
    tr.append(th);
    if (c.error || !c.found) {
      tr.className = c.error ? 'no-answer' : 'no-record';
      const td = el('td', c.error ? 'did not answer: ' + c.error : 'no record', c.error ? 'error' : 'help');
      td.colSpan = 8;
      tr.append(td);
      return tr;
    }
    tr.className = 'step-' + c.step.replace(/ /g, '-');
    tr.dataset.state = c.state;
    const state = el('td', null, 'state');
    state.append(el('span', c.state, c.step === 'decided' ? (c.state === 'approved' ? 'up' : 'down') : null));
    state.append(el('span', ' (' + c.step + (c.unfiled ? ', not yet filed' : '') + ')', 'help'));
    if (c.rule) state.append(el('div', 'rule ' + c.rule, 'help'));
    const why = [c.reason, c.auth_code ? 'auth ' + c.auth_code : ''].filter((x) => x).join(' · ');
    tr.append(el('td', c.attempt, 'num'), state, el('td', why || '-'), el('td', c.amount || '-', 'num'),
      el('td', c.payment_type || '-'), el('td', c.masked_pan || '-', 'card'),
      el('td', c.updated ? new Date(c.updated).toLocaleString() : '-'));
    const cbs = el('td', null, 'callbacks');
    if (c.callbacks && c.callbacks.length) {
      const ul = el('ul', null, 'inst');
      for (const e of c.callbacks) {
        ul.append(el('li', e.event_id + ': ' + e.status + ', ' + e.attempts + (e.attempts === 1 ? ' attempt' : ' attempts') +
          (e.last_error ? ' (last error: ' + e.last_error + ')' : ''), e.status === 'dead' ? 'down' : null));
      }
      cbs.append(ul);
    } else {
      cbs.textContent = '-';
    }
    tr.append(cbs);
    return tr;
  }

  // --- find an error by its reference ---

  $('ref-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    $('ref').hidden = true;
    $('ref-error').textContent = '';
    $('ref-replicas').textContent = 'Asking every replica…';
    $('ref-find').disabled = true;
    try {
      const r = await api('GET', '/api/ref?' + new URLSearchParams({ id: $('ref-id').value.trim() }));
      $('ref').tBodies[0].replaceChildren(...r.refusals.map((f) => {
        const tr = el('tr');
        const txn = el('td', f.transaction_id || '-');
        if (f.transaction_id && f.partner_id) {
          const b = el('button', 'find', 'link');
          b.type = 'button';
          b.addEventListener('click', () => {
            $('txn-partner').value = f.partner_id;
            $('txn-id').value = f.transaction_id;
            $('txn-form').requestSubmit();
          });
          txn.append(' ', b);
        }
        tr.append(el('td', new Date(f.time).toLocaleString()), el('td', f.replica), el('td', f.method), el('td', f.partner_id || '-'),
          txn, el('td', f.code + (f.reason ? ' · ' + f.reason : ''), 'down'), el('td', f.message, 'change'));
        return tr;
      }));
      $('ref').hidden = false;
      $('ref-replicas').textContent = 'Searched replicas: ' + r.replicas.join(', ') + '.';
    } catch (e) {
      $('ref-replicas').textContent = '';
      $('ref-error').textContent = e.message;
    }
    $('ref-find').disabled = false;
  });

  // --- events and audit ---

  async function refreshLogs() {
    const ev = await api('GET', '/api/events');
    $('events').tBodies[0].replaceChildren(...(ev.events.length ? ev.events.map((e) => {
      const tr = el('tr');
      tr.append(el('td', time(e.time)), el('td', e.replica || '-'), el('td', e.cell), el('td', e.kind, e.kind), el('td', e.detail || ''));
      return tr;
    }) : [emptyRow(5, 'none')]));
    const au = await api('GET', '/api/audit');
    $('audit').tBodies[0].replaceChildren(...(au.records.length ? au.records.map((a) => {
      const tr = el('tr');
      const change = a.error ? a.error : (a.before || '') + (a.after ? ' → ' + a.after : '');
      tr.append(el('td', new Date(a.time).toLocaleString()), el('td', a.actor), el('td', a.role), el('td', a.method),
        el('td', a.outcome, a.outcome === 'OK' ? 'up' : 'down'), el('td', change, 'change'));
      return tr;
    }) : [emptyRow(6, 'none')]));
  }

  function emptyRow(n, text) {
    const tr = el('tr'), td = el('td', text, 'help');
    td.colSpan = n;
    tr.append(td);
    return tr;
  }

  // --- start ---
  actionChanged();
  api('GET', '/api/session').then(loggedIn, () => loggedOut(''));
})();
