// The Sluice dashboard: every REFRESH_MS it lists and describes topics, groups and
// subscriptions through the /v1 API and redraws them, keeping a history of lag and backlog
// for the charts. A chosen subscription's settings can be changed in place (PATCH); a
// subscription can be paused, sought or purged (the last two after a confirmation that
// shows a dry run's counts), and a push one's signing secret rotated (the new one shown
// once, with when the old one stops signing); its dead-letter queue redriven, purged or
// pruned one message at a time (each after a confirmation), and a live tail long-polls
// one partition. Every
// failure of a call is shown in the page's error list.

import { api, ApiError, describe, seg } from './api.js';
import { ago, bytes, cell, clock, duration, h, preview, setOptions, table } from './dom.js';
import { lineChart } from './chart.js';

const REFRESH_MS = 2000;
/** Points kept per chart: 10 minutes at one refresh every 2 s. */
const HISTORY = 300;
/** Events kept in the live tail's list. */
const TAIL_KEEP = 200;
/** The backlog counts charted: field, label, colour. */
const BACKLOG_SERIES = [
  ['visible', 'visible', '#2f6fb3'], ['in_flight', 'in flight', '#d08a1a'],
  ['delayed', 'delayed', '#7a5cc2'], ['dead', 'dead', '#c23b3b'],
];

const $ = (id) => document.getElementById(id);

/** What the last refresh saw, and the histories the charts draw. */
const state = {
  topics: [],
  groups: [],
  subscriptions: [],
  lag: new Map(), // group → [{ t, v }]
  backlog: new Map(), // "topic/sub" → [{ t, visible, in_flight, delayed, dead }]
  push: new Map(), // "topic/sub" → { succeeded, failed, health } at the last refresh
  moved: new Map(), // "topic/sub" → what its last seek or purge did
  rotated: new Map(), // "topic/sub" → the secret its last rotation answered, until hidden
  paused: false,
  timer: null,
};

// ---------------------------------------------------------------------------------------
// Errors: one line per source, replaced by that source's next error, cleared by its next
// success (or by hand).

const errors = new Map();

function report(source, error) {
  if (error && error.name === 'AbortError') return;
  const text = error instanceof ApiError
    ? `${error.code}${error.status ? ` (HTTP ${error.status})` : ''}: ${error.message}`
    : String((error && error.message) || error);
  errors.set(source, `${source}: ${text}`);
  renderErrors();
}

function clearError(source) {
  if (errors.delete(source)) renderErrors();
}

function renderErrors() {
  const list = $('errors');
  list.hidden = errors.size === 0;
  list.replaceChildren(...[...errors].map(([source, text]) => h('li', { dataset: { testid: 'error', source } },
    h('span', {}, text),
    h('button', { type: 'button', class: 'link', title: 'dismiss', onclick: () => clearError(source) }, '×'))));
}

// Anything that slips past a handler still lands in the page, not in the console.
window.addEventListener('unhandledrejection', (event) => {
  event.preventDefault();
  report('page', event.reason);
});

// ---------------------------------------------------------------------------------------
// Refresh.

let refreshing = null; // the refresh under way
let queued = null; // the one asked for while it runs

/** Refreshes now, or right after the refresh under way (never two at once); answers when
 *  that refresh is done. Then the next one is scheduled, unless paused. */
function refresh() {
  if (refreshing) {
    queued ??= refreshing.then(() => {
      queued = null;
      return refresh();
    });
    return queued;
  }
  clearTimeout(state.timer);
  refreshing = refreshOnce().finally(() => {
    refreshing = null;
    if (!state.paused && !queued) state.timer = setTimeout(refresh, REFRESH_MS);
  });
  return refreshing;
}

/** Lists and describes everything, records the histories and redraws. */
async function refreshOnce() {
  try {
    const [{ topics }, { groups }] = await Promise.all([api('GET', '/topics'), api('GET', '/groups')]);
    const described = await Promise.all(topics.map(async (topic) => {
      const path = `/topics/${seg(topic.name)}`;
      const [info, subs] = await Promise.all([describe(path), describe(`${path}/subscriptions`)]);
      const subscriptions = await Promise.all((subs ? subs.subscriptions : [])
        .map((sub) => describe(`${path}/subscriptions/${seg(sub.name)}`)));
      return { info, subscriptions: subscriptions.filter(Boolean) };
    }));
    const groupInfo = await Promise.all(groups.map((g) => describe(`/groups/${seg(g)}`)));
    state.topics = described.map((d) => d.info).filter(Boolean);
    state.subscriptions = described.flatMap((d) => d.subscriptions);
    state.groups = groupInfo.filter(Boolean);
    record(Date.now());
    render();
    await loadDlq();
    $('refresh-status').textContent = `updated ${clock(Date.now())}`;
    clearError('refresh');
  } catch (error) {
    report('refresh', error);
    $('refresh-status').textContent = 'refresh failed';
  }
}

/** Appends this refresh's lag and backlog to the histories; forgets what is gone. */
function record(t) {
  const keep = (history, key, point) => {
    const points = history.get(key) || [];
    points.push(point);
    if (points.length > HISTORY) points.splice(0, points.length - HISTORY);
    history.set(key, points);
  };
  for (const g of state.groups) keep(state.lag, g.group, { t, v: g.lag });
  for (const s of state.subscriptions) keep(state.backlog, subKey(s), { t, ...s.backlog });
  for (const s of state.subscriptions.filter((s) => s.push)) {
    const { succeeded, failed } = s.push.deliveries;
    state.push.set(subKey(s), { succeeded, failed, health: pushHealth(state.push.get(subKey(s)), s.push.deliveries) });
  }
  prune(state.lag, state.groups.map((g) => g.group));
  prune(state.backlog, state.subscriptions.map(subKey));
  prune(state.push, state.subscriptions.filter((s) => s.push).map(subKey));
}

/** How a push target is doing, from what changed since the last refresh: "failing" when
 *  only failures were added, "degraded" when failures and successes were, "ok" when only
 *  successes were; unchanged when nothing was delivered. At first sight, from the totals. */
function pushHealth(previous, deliveries) {
  if (!previous) {
    if (deliveries.attempted === 0) return 'idle';
    return deliveries.succeeded === 0 ? 'failing' : 'ok';
  }
  const failed = deliveries.failed - previous.failed;
  const succeeded = deliveries.succeeded - previous.succeeded;
  if (failed > 0) return succeeded > 0 ? 'degraded' : 'failing';
  return succeeded > 0 ? 'ok' : previous.health;
}

function prune(history, live) {
  for (const key of history.keys()) if (!live.includes(key)) history.delete(key);
}

const subKey = (s) => `${s.topic}/${s.name}`;

function render() {
  renderTopics();
  renderGroups();
  renderSubscriptions();
  setOptions($('tail-topic'), state.topics.map((t) => t.name), 'no topics');
  setOptions($('dlq-subscription'), state.subscriptions.map(subKey), 'no subscriptions');
  setOptions($('settings-subscription'), state.subscriptions.map(subKey), 'no subscriptions');
}

// ---------------------------------------------------------------------------------------
// Topics.

function renderTopics() {
  $('topics').replaceChildren(...(state.topics.length ? state.topics.map(topicCard) : [empty('No topics yet.')]));
}

function topicCard(topic) {
  const parts = topic.partition_states;
  const events = parts.reduce((n, p) => n + p.high_watermark - p.log_start_offset, 0);
  const size = parts.reduce((n, p) => n + p.bytes, 0);
  const upkeep = topic.upkeep;
  return h('article', { class: 'card', dataset: { testid: 'topic', topic: topic.name } },
    h('header', {}, h('h3', {}, topic.name),
      stat('partitions', topic.partitions, 'topic-partitions'),
      stat('events', events, 'topic-events'),
      stat('bytes', bytes(size), 'topic-bytes'),
      stat('retention', topic.retention_ms === null ? 'server default' : duration(topic.retention_ms),
        'topic-retention'),
      stat('bytes bound', topic.retention_bytes === null ? 'none' : bytes(topic.retention_bytes))),
    table('topic-partitions', ['partition', 'log start', 'high watermark', 'events', 'bytes'],
      parts.map((p) => h('tr', { dataset: { testid: 'topic-partition', partition: p.partition } },
        cell(p.partition), cell(p.log_start_offset, 'log-start'), cell(p.high_watermark, 'high-watermark'),
        cell(p.high_watermark - p.log_start_offset), cell(bytes(p.bytes))))),
    h('p', { class: 'muted small' }, `upkeep: ${upkeep.segments_expired} segments expired `
      + `(${bytes(upkeep.bytes_expired)}), ${upkeep.segments_merged} merged into ${upkeep.segments_written}`
      + (upkeep.last_change_ms ? `, last ${ago(upkeep.last_change_ms)}` : '')));
}

// ---------------------------------------------------------------------------------------
// Consumer groups.

function renderGroups() {
  $('groups').replaceChildren(...(state.groups.length ? state.groups.map(groupCard) : [empty('No consumer groups.')]));
}

function groupCard(group) {
  const now = Date.now();
  return h('article', { class: 'card', dataset: { testid: 'group', group: group.group } },
    h('header', {}, h('h3', {}, group.group),
      stat('generation', group.generation),
      stat('members', group.members.length, 'group-members'),
      stat('lag', group.lag, 'group-lag')),
    lineChart('lag-chart', [{ name: 'lag', color: '#2f6fb3', points: state.lag.get(group.group) || [] }]),
    group.members.length
      ? table('group-member-table', ['member', 'assignment', 'session ends in'], group.members.map((m) => [
        h('code', {}, m.member_id),
        m.assignment.map((a) => `${a.topic}/${a.partition}`).join(', ') || '–',
        duration(Math.max(0, m.expires_at_ms - now))]))
      : h('p', { class: 'muted small' }, 'No live members'
        + (group.offsets_expire_at_ms ? `; offsets expire ${clock(group.offsets_expire_at_ms)}.` : '.')),
    table('group-partition-table', ['topic', 'partition', 'committed', 'high watermark', 'lag', 'owner'],
      group.partitions.map((p) => h('tr', { dataset: { testid: 'group-partition', topic: p.topic, partition: p.partition } },
        cell(p.topic), cell(p.partition), cell(p.committed_offset === null ? '–' : p.committed_offset),
        cell(p.high_watermark), cell(p.lag, 'partition-lag'), cell(p.member_id ? h('code', {}, p.member_id) : '–')))));
}

// ---------------------------------------------------------------------------------------
// Subscriptions.

function renderSubscriptions() {
  $('subscriptions').replaceChildren(...(state.subscriptions.length
    ? state.subscriptions.map(subscriptionCard) : [empty('No subscriptions.')]));
}

function subscriptionCard(sub) {
  const b = sub.backlog;
  const points = state.backlog.get(subKey(sub)) || [];
  return h('article', { class: 'card', dataset: { testid: 'subscription', topic: sub.topic, subscription: sub.name } },
    h('header', {}, h('h3', {}, h('span', { class: 'muted' }, `${sub.topic} / `), sub.name),
      h('span', { class: `pill ${sub.push ? 'push' : ''}` }, sub.push ? 'push' : 'pull'),
      h('span', { class: `pill ${sub.state === 'active' ? '' : 'warn'}`, dataset: { testid: 'sub-state' } }, sub.state),
      stat('max receives', sub.max_receive_count),
      stat('visibility', duration(sub.visibility_timeout_ms)),
      sub.filter ? stat('filter', 'yes') : null,
      sub.rate ? stat('rate', `${sub.rate.per_second}/s, burst ${sub.rate.burst}`, 'sub-rate') : null,
      sub.rate ? stat('throttled', duration(sub.throttled_ms || 0), 'sub-throttled') : null,
      h('span', { class: 'spacer' }),
      h('button', { type: 'button', dataset: { testid: 'sub-pause' }, onclick: () => pauseOrResume(sub) },
        sub.state === 'paused' ? 'Resume' : 'Pause'),
      h('button', { type: 'button', dataset: { testid: 'edit-settings' }, onclick: () => editSettings(subKey(sub)) },
        'Settings'),
      h('button', { type: 'button', dataset: { testid: 'show-dlq' }, onclick: () => showDlq(subKey(sub)) },
        'Dead letters')),
    h('div', { class: 'seek' },
      h('input', { type: 'text', dataset: { testid: 'sub-seek-to' }, 'aria-label': 'seek to',
        placeholder: 'earliest | latest | 2026-12-01T00:00:00Z | o0,o1,…' }),
      h('button', { type: 'button', dataset: { testid: 'sub-seek' }, onclick: (e) => seek(sub, e.target) }, 'Seek'),
      h('button', { type: 'button', class: 'danger', dataset: { testid: 'sub-purge' }, onclick: () => seek(sub) },
        'Purge'),
      h('span', { class: 'muted', dataset: { testid: 'sub-moved' } }, state.moved.get(subKey(sub)) || '')),
    h('div', { class: 'stats' },
      stat('visible', b.visible, 'sub-visible'), stat('in flight', b.in_flight, 'sub-in-flight'),
      stat('delayed', b.delayed, 'sub-delayed'), stat('dead', b.dead, 'sub-dead'),
      stat('expired', b.expired), stat('filtered', b.filtered),
      stat('oldest visible', duration(b.oldest_visible_age_ms), 'sub-oldest'),
      sub.exact ? null : h('span', { class: 'pill warn', title: 'counts changed while being read' }, 'inexact')),
    sub.push ? pushStatus(sub.push, sub.delivery, state.push.get(subKey(sub))?.health) : null,
    sub.push?.url ? secretRow(sub) : null,
    lineChart('backlog-chart', BACKLOG_SERIES.map(([field, name, color]) => ({
      name, color, points: points.map((p) => ({ t: p.t, v: p[field] })),
    }))));
}

/** Resumes a paused subscription, or pauses one that delivers; then refreshes at once. */
async function pauseOrResume(sub) {
  const verb = sub.state === 'paused' ? 'resume' : 'pause';
  try {
    await api('POST', `/topics/${seg(sub.topic)}/subscriptions/${seg(sub.name)}/${verb}`, {});
    clearError('subscription');
  } catch (error) {
    report('subscription', error);
  }
  await refresh();
}

/** `to` as the seek route takes it: earliest, latest, one offset per partition, or a time. */
function seekTarget(raw) {
  if (raw === 'earliest' || raw === 'latest') return raw;
  if (/^\d+(,\d+)*$/.test(raw)) return { offsets: raw.split(',').map(Number) };
  const ms = Date.parse(raw);
  if (Number.isNaN(ms)) throw new Error(`seek to "${raw}": not earliest, latest, o0,o1,… or a time`);
  return { timestamp_ms: ms };
}

/** Seeks a subscription to the target typed beside `button` (none: a purge, to latest):
 *  counts it with a dry run, asks with those numbers, then moves it and refreshes. */
async function seek(sub, button) {
  const path = `/topics/${seg(sub.topic)}/subscriptions/${seg(sub.name)}`;
  try {
    const raw = button ? button.previousElementSibling.value.trim() : 'latest';
    const to = seekTarget(raw);
    const dry = await api('POST', `${path}/seek`, { to, dry_run: true });
    const what = `${dry.redeliver} to redeliver and ${dry.skip} to skip`;
    const [question, label] = button
      ? [`Seek ${sub.topic} / ${sub.name} to ${raw}? Now that is ${what}.`, 'Seek']
      : [`Purge ${sub.topic} / ${sub.name}? Now that is ${what}; its dead letters stay.`, 'Purge'];
    if (!await confirmDialog(question, label)) return;
    const done = button ? await api('POST', `${path}/seek`, { to }) : await api('POST', `${path}/purge`, {});
    state.moved.set(subKey(sub), `${label.toLowerCase()}: ${done.redeliver} redelivered, ${done.skip} skipped`);
    clearError('subscription');
  } catch (error) {
    report('subscription', error);
  }
  await refresh();
}

/** A URL target's signing secret: a button that rotates it, and the new secret the rotation
 *  answered (the only time the API shows it) with when the previous one stops signing,
 *  until hidden. */
function secretRow(sub) {
  const rotated = state.rotated.get(subKey(sub));
  return h('div', { class: 'seek', dataset: { testid: 'push-secret' } },
    h('button', { type: 'button', dataset: { testid: 'sub-rotate-secret' }, onclick: () => rotateSecret(sub) },
      'Rotate secret'),
    rotated ? h('span', {}, 'new secret, shown once: ',
      h('code', { dataset: { testid: 'sub-new-secret' } }, rotated.secret)) : null,
    rotated ? h('span', { class: 'muted', dataset: { testid: 'sub-previous-expires' } },
      `the previous one signs too until ${new Date(rotated.previous_expires_ms).toISOString()}`) : null,
    rotated ? h('button', { type: 'button', dataset: { testid: 'sub-secret-hide' },
      onclick: () => { state.rotated.delete(subKey(sub)); renderSubscriptions(); } }, 'Hide') : null);
}

/** Rotates a push subscription's secret after a confirmation (the old one keeps signing
 *  beside the new for the default overlap, 24 h), then shows the new one. */
async function rotateSecret(sub) {
  const question = `Rotate the signing secret of ${sub.topic} / ${sub.name}? `
    + 'The previous one keeps signing beside the new for 24 hours.';
  try {
    if (!await confirmDialog(question, 'Rotate')) return;
    const path = `/topics/${seg(sub.topic)}/subscriptions/${seg(sub.name)}/secret`;
    state.rotated.set(subKey(sub), await api('POST', path, {}));
    clearError('subscription');
  } catch (error) {
    report('subscription', error);
  }
  await refresh();
}

/** A push target, how it is doing, its deliveries so far, its flow state and its last error. */
function pushStatus(push, delivery, health = 'idle') {
  const d = push.deliveries;
  return h('div', { class: `push-status ${health}`, dataset: { testid: 'push-status' } },
    h('span', { class: 'health', dataset: { testid: 'push-health' } }, health),
    h('span', {}, 'target ', h('code', {}, push.url || `lambda:${push.lambda}`)),
    stat('attempted', d.attempted, 'push-attempted'),
    stat('succeeded', d.succeeded, 'push-succeeded'),
    stat('failed', d.failed, 'push-failed'),
    delivery ? stat('in-flight limit', `${delivery.in_flight_limit} / ${push.max_in_flight}`, 'push-in-flight-limit') : null,
    delivery?.retry_after_until_ms
      ? stat('Retry-After', `until ${new Date(delivery.retry_after_until_ms).toLocaleTimeString()}`, 'push-retry-after')
      : null,
    delivery?.suspended_since_ms
      ? h('span', { class: 'pill warn', dataset: { testid: 'push-suspended' } },
        `suspended ${ago(delivery.suspended_since_ms)}: one probe a minute`)
      : null,
    push.last_error
      ? h('span', { class: 'error-text', dataset: { testid: 'push-last-error' } },
        `last error ${ago(push.last_error_ms)}: ${push.last_error}`)
      : h('span', { class: 'muted' }, 'no errors'));
}

// ---------------------------------------------------------------------------------------
// Dead-letter queue of the chosen subscription.

function chosenDlq() {
  const value = $('dlq-subscription').value;
  if (!value) return null;
  const [topic, name] = value.split('/');
  return { topic, name, path: `/topics/${seg(topic)}/subscriptions/${seg(name)}/dlq` };
}

function showDlq(key) {
  $('dlq-subscription').value = key;
  loadDlq();
  $('dlq-section').scrollIntoView({ behavior: 'smooth', block: 'start' });
}

/** Lists the first page of the chosen subscription's dead letters. */
async function loadDlq() {
  const chosen = chosenDlq();
  for (const id of ['dlq-redrive', 'dlq-purge']) $(id).disabled = !chosen;
  if (!chosen) {
    $('dlq-summary').textContent = 'No subscription chosen.';
    $('dlq').replaceChildren();
    return;
  }
  try {
    const page = await api('GET', `${chosen.path}?limit=100`);
    if (chosenDlq()?.path !== chosen.path) return; // the choice changed meanwhile
    const n = page.dead_letters.length;
    $('dlq-summary').replaceChildren(h('b', { dataset: { testid: 'dlq-count' } }, page.next ? `${n}+` : n),
      ` dead letter${n === 1 ? '' : 's'} in ${chosen.topic} / ${chosen.name}`
      + (page.next ? ` (the first ${n} shown)` : ''));
    $('dlq').replaceChildren(n === 0 ? empty('The dead-letter queue is empty.') : table('dlq-table',
      ['id', 'key', 'value', 'receives', 'dead since', 'reason', ''],
      page.dead_letters.map((d) => h('tr', { dataset: { testid: 'dlq-row', id: d.id } },
        cell(h('code', {}, d.id)), cell(d.event?.key ?? '–'), h('td', { class: 'value' }, h('code', {}, preview(d.event))),
        cell(d.receive_count), cell(clock(d.dead_ms)), h('td', { class: 'wrap' }, d.reason.replaceAll('_', ' ')),
        cell(h('button', { type: 'button', class: 'danger small', dataset: { testid: 'dlq-delete' },
          onclick: () => deleteDeadLetter(chosen, d.id) }, 'Delete'))))));
    clearError('dead-letter queue');
  } catch (error) {
    report('dead-letter queue', error);
  }
}

/** Asks, then does `action`, shows its outcome and refreshes at once. */
async function confirmed(question, label, action) {
  if (!await confirmDialog(question, label)) return;
  try {
    $('dlq-outcome').textContent = `${await action()} at ${clock(Date.now())}.`;
    clearError('dead-letter action');
  } catch (error) {
    report('dead-letter action', error);
  }
  await refresh();
}

function deleteDeadLetter(chosen, id) {
  return confirmed(`Delete dead letter ${id} of ${chosen.topic} / ${chosen.name} for good?`, 'Delete',
    async () => {
      await api('DELETE', `${chosen.path}/${seg(id)}`);
      return `deleted ${id}`;
    });
}

$('dlq-redrive').addEventListener('click', () => {
  const chosen = chosenDlq();
  const raw = $('dlq-max').value.trim();
  const max = raw === '' ? null : Number(raw);
  if (max !== null && !(Number.isInteger(max) && max >= 1)) {
    return report('dead-letter action', new Error('"Redrive at most" takes a whole number from 1, or nothing for all'));
  }
  const what = max ? `at most ${max} dead letters` : 'every dead letter';
  return confirmed(`Send ${what} of ${chosen.topic} / ${chosen.name} back into its queue?`, 'Redrive', async () => {
    const answer = await api('POST', `${chosen.path}/redrive`, max ? { max_messages: max } : {});
    return `redrove ${answer.redriven}`;
  });
});

$('dlq-purge').addEventListener('click', () => {
  const chosen = chosenDlq();
  return confirmed(`Remove every dead letter of ${chosen.topic} / ${chosen.name} for good?`, 'Purge', async () => {
    const answer = await api('DELETE', chosen.path);
    return `purged ${answer.purged}`;
  });
});

$('dlq-subscription').addEventListener('change', () => loadDlq());

/** The page's own confirmation dialog; answers whether the user confirmed. */
function confirmDialog(question, label) {
  const dialog = $('confirm');
  $('confirm-message').textContent = question;
  $('confirm-ok').textContent = label;
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
  });
}

// ---------------------------------------------------------------------------------------
// Live tail: long polls of one partition from an offset, newest event first.

let tail = null; // the AbortController of the running tail

$('tail-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const topic = $('tail-topic').value;
  if (!topic) return report('tail', new Error('there is no topic to tail'));
  runTail(topic, Number($('tail-partition').value), $('tail-from').value.trim());
});

$('tail-stop').addEventListener('click', () => stopTail());

function stopTail() {
  if (tail) tail.abort();
  tail = null;
  tailState('stopped', 'Stopped.');
}

function tailState(name, text) {
  const status = $('tail-status');
  status.dataset.state = name;
  status.textContent = text;
  $('tail-start').disabled = name === 'running';
  $('tail-stop').disabled = name !== 'running';
}

/** Resolves `from` (latest, earliest or an offset) to an offset first, so that every event
 *  published after the status says "from offset N" is shown; then long-polls from it. */
async function runTail(topic, partition, from) {
  stopTail();
  const controller = new AbortController();
  const { signal } = controller;
  tail = controller;
  $('tail-events').replaceChildren();
  const base = `/topics/${seg(topic)}/partitions/${partition}`;
  try {
    let offset = /^\d+$/.test(from) ? Number(from)
      : (await api('GET', `${base}/offsets?timestamp_ms=${encodeURIComponent(from)}`, undefined, { signal })).offset;
    const where = `${topic} / partition ${partition}`;
    tailState('running', `Tailing ${where} from offset ${offset}.`);
    $('tail-status').dataset.from = offset;
    clearError('tail');
    while (!signal.aborted) {
      const page = await api('GET', `${base}/events?offset=${offset}&limit=100&wait_ms=10000`, undefined, { signal });
      showTailEvents(page.events);
      offset = page.next_offset;
      tailState('running', `Tailing ${where}: next offset ${offset}, high watermark ${page.high_watermark}.`);
    }
  } catch (error) {
    if (signal.aborted) return;
    report('tail', error);
    tail = null;
    tailState('failed', 'Stopped by an error.');
  }
}

function showTailEvents(events) {
  const list = $('tail-events');
  for (const e of events) {
    list.prepend(h('li', { dataset: { testid: 'tail-event', offset: e.offset } },
      h('span', { class: 'offset' }, `#${e.offset}`), h('span', { class: 'muted' }, clock(e.timestamp_ms)),
      e.key === null ? null : h('span', { class: 'key' }, e.key), h('code', {}, preview(e))));
  }
  while (list.children.length > TAIL_KEEP) list.lastElementChild.remove();
}

// ---------------------------------------------------------------------------------------
// A chosen subscription's settings, changed in place (only what differs is sent).

/** `N` or `N/BURST` as the API takes a rate (empty: none); the server checks the bounds. */
function readRate(text) {
  if (!text.trim()) return null;
  const m = /^\s*(\d+)\s*(?:\/\s*(\d+)\s*)?$/.exec(text);
  if (!m) throw new Error('rate is N or N/BURST messages a second, or empty for none');
  return { per_second: Number(m[1]), burst: Number(m[2] ?? m[1]) };
}

/** The form's fields: input id, setting, how a value is read from the input, and shown in it. */
const SETTINGS = [
  ['settings-visibility', 'visibility_timeout_ms', Number],
  ['settings-max-receives', 'max_receive_count', Number],
  ['settings-delay', 'delay_ms', Number],
  ['settings-rate', 'rate', readRate, (rate) => `${rate.per_second}/${rate.burst}`],
  ['settings-filter', 'filter', (text) => (text.trim() ? JSON.parse(text) : null), JSON.stringify],
];

function chosenSettings() {
  return state.subscriptions.find((s) => subKey(s) === $('settings-subscription').value) || null;
}

/** Fills the form with the chosen subscription's settings as last described. */
function fillSettings() {
  const sub = chosenSettings();
  for (const [id, field, , show] of SETTINGS) {
    const value = sub ? sub[field] : null;
    $(id).value = value === null || value === undefined ? '' : (show ? show(value) : value);
  }
  $('settings-save').disabled = !sub;
}

function editSettings(key) {
  $('settings-subscription').value = key;
  fillSettings();
  $('settings-outcome').textContent = '';
  $('settings-section').scrollIntoView({ behavior: 'smooth', block: 'start' });
}

/** Sends the settings that differ from the subscription's, then shows what it answered. */
async function saveSettings(event) {
  event.preventDefault();
  const sub = chosenSettings();
  if (!sub) return;
  try {
    const change = {};
    for (const [id, field, read] of SETTINGS) {
      const value = read($(id).value);
      if (JSON.stringify(value) !== JSON.stringify(sub[field] ?? null)) change[field] = value;
    }
    const path = `/topics/${seg(sub.topic)}/subscriptions/${seg(sub.name)}`;
    const changed = await api('PATCH', path, change);
    const names = Object.keys(change);
    $('settings-outcome').textContent = names.length
      ? `saved ${names.join(', ')} of ${sub.topic} / ${sub.name}` : 'nothing to change';
    Object.assign(sub, changed);
    fillSettings();
    clearError('settings');
  } catch (error) {
    report('settings', error);
  }
  await refresh();
}

$('settings-subscription').addEventListener('change', fillSettings);
$('settings-form').addEventListener('submit', saveSettings);

// ---------------------------------------------------------------------------------------
// Little pieces.

function stat(label, value, testid) {
  return h('span', { class: 'stat' }, h('span', { class: 'label' }, label),
    h('b', { dataset: testid ? { testid } : undefined }, value));
}

function empty(text) {
  return h('p', { class: 'muted empty' }, text);
}

$('pause').addEventListener('click', () => {
  state.paused = !state.paused;
  $('pause').textContent = state.paused ? 'Resume' : 'Pause';
  if (state.paused) clearTimeout(state.timer);
  else refresh();
});

refresh();
