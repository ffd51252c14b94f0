// The dashboard `sluice serve` shows at `/`, driven in headless Chromium: a real server on a
// free loopback port over a fresh data directory, data made through the HTTP API, and the
// page checked against what the API answers. Run by infra/browser.sh (`node --test` here).
//
// Environment: SLUICE_BIN (default <target>/debug/sluice), CARGO_TARGET_DIR (default
// target), CHROMIUM (default /usr/bin/chromium). The screenshot goes to
// <target>/browser/dashboard.png.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const targetDir = path.resolve(root, process.env.CARGO_TARGET_DIR || 'target');
const sluiceBin = process.env.SLUICE_BIN || path.join(targetDir, 'debug', 'sluice');
const chromiumBin = process.env.CHROMIUM || '/usr/bin/chromium';
const screenshot = path.join(targetDir, 'browser', 'dashboard.png');

const TOPIC = 'orders';
const PARTITIONS = 3;
const EVENTS = 30;
const DEAD = 6;
/** The console error Chromium logs for the 416 the error check provokes on purpose. */
const EXPECTED_416 = /Failed to load resource: the server responded with a status of 416/;
/** The settings form's refused filter, logged by Chromium as the 416 is. */
const EXPECTED_400 = /Failed to load resource: the server responded with a status of 400/;

// ---------------------------------------------------------------------------------------
// Helpers.

/** Polls `check` (sync or async) every 100 ms until it returns a truthy value, which it
 *  answers; fails after `timeoutMs` with `what` and the last value or error seen. */
async function eventually(what, check, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Starts `sluice serve` on a free loopback port over `dataDir`; answers the child and its
 *  base URL once it says where it listens. */
async function startSluice(dataDir) {
  const child = spawn(sluiceBin, ['serve', '--addr', '127.0.0.1:0', '--data-dir', dataDir], {
    env: { ...process.env, RUST_LOG: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('sluice serve did not listen within 15 s')), 15_000);
    child.once('error', (error) => reject(new Error(`cannot run ${sluiceBin}: ${error.message}`)));
    child.once('exit', (code) => reject(new Error(`sluice serve exited (${code}) before listening`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const match = /^listening on (\S+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
  });
  return { child, base };
}

/** Stops a child with SIGTERM (SIGKILL after 5 s) and waits for it to exit. */
async function stop(child) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(killer);
}

/** A push target on loopback that fails its first delivery with a 500 and accepts the rest. */
async function startReceiver() {
  let requests = 0;
  const server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      requests += 1;
      response.writeHead(requests === 1 ? 500 : 200, { 'content-type': 'application/json' });
      response.end('{}');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${server.address().port}/hooks/orders` };
}

// ---------------------------------------------------------------------------------------
// The story.

describe('the dashboard', () => {
  let scratch;
  let sluice;
  let receiver;
  let context;
  let page;
  const consoleErrors = [];
  const pageErrors = [];

  /** Calls the API; answers the JSON (null for 204), failing on an error status. */
  async function call(method, route, body) {
    const response = await fetch(`${sluice.base}/v1${route}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    assert.ok(response.ok, `${method} ${route}: ${response.status} ${text}`);
    return text ? JSON.parse(text) : null;
  }

  const sub = (name, rest = '') => `/topics/${TOPIC}/subscriptions/${name}${rest}`;
  const deadLetters = async () => (await call('GET', sub('work', '/dlq?limit=1000'))).dead_letters;
  const text = (locator) => locator.textContent({ timeout: 2_000 });
  const card = (kind, attrs) => page.locator(`[data-testid=${kind}]${Object.entries(attrs)
    .map(([k, v]) => `[data-${k}="${v}"]`).join('')}`);

  /** Receives up to `n` messages of the `work` subscription and nacks them: with
   *  max_receive_count 1 they go to its dead-letter queue. */
  async function deadLetter(n) {
    const receipts = [];
    await eventually(`${n} messages received`, async () => {
      const { messages } = await call('POST', sub('work', '/receive'), { max_messages: n - receipts.length });
      receipts.push(...messages.map((m) => m.receipt));
      return receipts.length >= n;
    });
    const { results } = await call('POST', sub('work', '/nack'), { receipts });
    assert.ok(results.every((r) => r.ok), JSON.stringify(results));
  }

  let member;
  /** Every event the group's one member polled: the next offset per partition. */
  const polledTo = new Map();

  before(async () => {
    scratch = await mkdtemp(path.join(tmpdir(), 'sluice-browser-'));
    sluice = await startSluice(path.join(scratch, 'data'));
    receiver = await startReceiver();

    await call('PUT', `/topics/${TOPIC}`, { partitions: PARTITIONS, retention_ms: 86_400_000 });
    const events = Array.from({ length: EVENTS }, (_, i) => ({
      key: `customer-${i % 7}`, value: { order: i, total: 10 + i }, headers: { source: 'shop' },
    }));
    await call('POST', `/topics/${TOPIC}/events`, { events });

    // A group whose one member reads everything and commits half of each partition.
    const join = await call('POST', '/groups/billing/poll', { topics: [TOPIC], session_timeout_ms: 120_000 });
    member = { member_id: join.member_id, generation: join.generation };
    let seen = join.events.length;
    join.events.forEach((e) => polledTo.set(e.partition, e.offset + 1));
    await eventually('the group to poll every event', async () => {
      const { events: more } = await call('POST', '/groups/billing/poll', { member_id: member.member_id, topics: [TOPIC] });
      more.forEach((e) => polledTo.set(e.partition, e.offset + 1));
      seen += more.length;
      return seen === EVENTS;
    });
    const half = [...polledTo].map(([partition, next]) => ({ topic: TOPIC, partition, offset: Math.floor(next / 2) }));
    await call('POST', '/groups/billing/commit', { ...member, offsets: half });

    // A pull queue whose first few messages die, and a push queue to the receiver.
    await call('PUT', sub('work'), { start: 'earliest', max_receive_count: 1 });
    await deadLetter(DEAD);
    await eventually(`${DEAD} dead letters`, async () => (await deadLetters()).length === DEAD);
    await call('PUT', sub('webhook'), { start: 'earliest', redelivery_backoff_ms: [200], push: { url: receiver.url } });
    await eventually('every message pushed, after one failure', async () => {
      const { backlog, push } = await call('GET', sub('webhook'));
      const pending = backlog.visible + backlog.in_flight + backlog.delayed;
      return pending === 0 && push.deliveries.failed === 1 && push.deliveries.succeeded >= 1;
    });

    context = await chromium.launchPersistentContext(path.join(scratch, 'chromium'), {
      executablePath: chromiumBin,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
        '--disable-sync', '--no-first-run'],
      viewport: { width: 1400, height: 1000 },
    });
    page = context.pages()[0] || await context.newPage();
    page.on('console', (message) => {
      if (message.type() === 'error') consoleErrors.push(message.text());
    });
    page.on('pageerror', (error) => pageErrors.push(error.message));
    page.on('dialog', (dialog) => {
      pageErrors.push(`unexpected native dialog: ${dialog.message()}`);
      dialog.dismiss();
    });
    await page.goto(`${sluice.base}/`);
  });

  after(async () => {
    await context?.close();
    await stop(sluice?.child);
    receiver?.server.close();
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  it('shows the topic, its partitions and its event counts', async () => {
    const topic = card('topic', { topic: TOPIC });
    await eventually('the topic\'s event count', async () => await text(topic.getByTestId('topic-events')) === `${EVENTS}`);
    assert.equal(await text(topic.getByTestId('topic-partitions').first()), `${PARTITIONS}`);
    const described = await call('GET', `/topics/${TOPIC}`);
    for (const p of described.partition_states) {
      const row = topic.locator(`[data-testid=topic-partition][data-partition="${p.partition}"]`);
      assert.equal(await text(row.getByTestId('high-watermark')), `${p.high_watermark}`);
      assert.equal(await text(row.getByTestId('log-start')), `${p.log_start_offset}`);
    }
    assert.equal(await text(topic.getByTestId('topic-retention')), '1 d');
  });

  it('shows a group\'s lag, falling to 0 once it commits everything', async () => {
    const group = card('group', { group: 'billing' });
    const { lag } = await call('GET', '/groups/billing');
    assert.ok(lag > 0, 'half committed');
    await eventually(`the group's lag of ${lag}`, async () => await text(group.getByTestId('group-lag')) === `${lag}`);
    assert.equal(await text(group.getByTestId('group-members')), '1');

    const all = [...polledTo].map(([partition, offset]) => ({ topic: TOPIC, partition, offset }));
    await call('POST', '/groups/billing/commit', { ...member, offsets: all });
    assert.equal((await call('GET', '/groups/billing')).lag, 0);
    await eventually('the group\'s lag of 0', async () => await text(group.getByTestId('group-lag')) === '0');
    const lags = await group.getByTestId('partition-lag').allTextContents();
    assert.deepEqual(lags, Array(PARTITIONS).fill('0'));
    // The chart has drawn the lag before and after.
    await eventually('a lag chart of several points', async () =>
      Number(await group.locator('[data-testid=lag-chart] svg').getAttribute('data-points')) >= 2);
  });

  it('shows each subscription\'s backlog and the push target\'s deliveries', async () => {
    const work = card('subscription', { topic: TOPIC, subscription: 'work' });
    await eventually('the dead count', async () => await text(work.getByTestId('sub-dead')) === `${DEAD}`);
    const { backlog } = await call('GET', sub('work'));
    assert.equal(await text(work.getByTestId('sub-visible')), `${backlog.visible}`);
    assert.equal(backlog.visible, EVENTS - DEAD);
    assert.match(await text(work.getByTestId('sub-oldest')), /\d/);

    // The receiver failed the first delivery and took the others, all before the page
    // loaded: it sees a target that delivers.
    const push = card('subscription', { topic: TOPIC, subscription: 'webhook' }).getByTestId('push-status');
    await eventually('a failed and a successful delivery', async () =>
      await text(push.getByTestId('push-failed')) === '1' && Number(await text(push.getByTestId('push-succeeded'))) >= 1);
    assert.match(await text(push.getByTestId('push-last-error')), /HTTP 500/);
    await eventually('a healthy target', async () => await text(push.getByTestId('push-health')) === 'ok');
    // A 500 does not slow a target down (a 429, a 503 or a timeout would): the limit is its ceiling.
    const { push: target, delivery } = await call('GET', sub('webhook'));
    assert.equal(delivery.in_flight_limit, target.max_in_flight);
    assert.equal(await text(push.getByTestId('push-in-flight-limit')), `${target.max_in_flight} / ${target.max_in_flight}`);
  });

  it('pauses a subscription, which then delivers nothing, and resumes it', async () => {
    const work = card('subscription', { topic: TOPIC, subscription: 'work' });
    const [state, button] = [work.getByTestId('sub-state'), work.getByTestId('sub-pause')];
    assert.equal(await text(state), 'active');
    await button.click();
    await eventually('the paused state', async () => await text(state) === 'paused');
    assert.equal((await call('GET', sub('work'))).state, 'paused');
    assert.equal(await text(button), 'Resume');
    const { messages } = await call('POST', `${sub('work')}/receive`, { max_messages: 10 });
    assert.equal(messages.length, 0, 'a paused subscription delivers nothing');
    await button.click();
    await eventually('the active state', async () => await text(state) === 'active');
    assert.equal((await call('GET', sub('work'))).state, 'active');
    assert.equal(await text(button), 'Pause');
  });

  it('changes a subscription\'s settings in place, and shows a refused value as an error', async () => {
    const work = card('subscription', { topic: TOPIC, subscription: 'work' });
    const before = await call('GET', sub('work'));
    await work.getByTestId('edit-settings').click();
    assert.equal(await page.getByTestId('settings-subscription').inputValue(), `${TOPIC}/work`);
    const visibility = page.getByTestId('settings-visibility');
    assert.equal(await visibility.inputValue(), String(before.visibility_timeout_ms), 'filled from describe');
    await visibility.fill(String(before.visibility_timeout_ms + 15000));
    await page.getByTestId('settings-save').click();
    const outcome = page.getByTestId('settings-outcome');
    await eventually('the change saved', async () => /saved visibility_timeout_ms of/.test(await text(outcome)));
    const after = await call('GET', sub('work'));
    assert.equal(after.visibility_timeout_ms, before.visibility_timeout_ms + 15000);
    assert.equal(after.max_receive_count, before.max_receive_count, 'only what changed was sent');

    // A pattern whose value is not a list of matches: the server refuses it, changing nothing.
    await page.getByTestId('settings-filter').fill('{"value": {"kind": "a"}}');
    await page.getByTestId('settings-save').click();
    const error = page.locator('[data-testid="error"][data-source="settings"]');
    await eventually('the refusal shown', async () => /invalid_filter/.test(await text(error)));
    assert.equal((await call('GET', sub('work'))).filter, null, 'nothing changed');
    await page.getByTestId('settings-filter').fill('');
    await visibility.fill(String(before.visibility_timeout_ms));
    await page.getByTestId('settings-save').click();
    await eventually('restored', async () => (await call('GET', sub('work'))).visibility_timeout_ms
      === before.visibility_timeout_ms);

    // A rate: N/BURST in the form, shown on the card; emptied, removed.
    const rate = page.getByTestId('settings-rate');
    assert.equal(await rate.inputValue(), '', 'no rate yet');
    await rate.fill('30/60');
    await page.getByTestId('settings-save').click();
    await eventually('the rate saved', async () => /saved rate of/.test(await text(outcome)));
    assert.deepEqual((await call('GET', sub('work'))).rate, { per_second: 30, burst: 60 });
    await eventually('the rate on the card', async () => await text(work.getByTestId('sub-rate')) === '30/s, burst 60');
    assert.equal(await rate.inputValue(), '30/60', 'filled from describe');
    await rate.fill('');
    await page.getByTestId('settings-save').click();
    await eventually('the rate removed', async () => (await call('GET', sub('work'))).rate === null);
  });

  it('redrives, deletes and purges dead letters, each after a confirmation', async () => {
    const work = card('subscription', { topic: TOPIC, subscription: 'work' });
    const rows = page.getByTestId('dlq-row');
    const dialog = page.getByTestId('confirm-dialog');
    await work.getByTestId('show-dlq').click();
    await eventually(`${DEAD} dead letters listed`, async () => await rows.count() === DEAD);
    const listed = await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.id));
    assert.deepEqual(listed, (await deadLetters()).map((d) => d.id));

    // Redrive two: cancelled first, which changes nothing.
    await page.getByTestId('dlq-max').fill('2');
    await page.getByTestId('dlq-redrive').click();
    await dialog.waitFor({ state: 'visible' });
    assert.match(await text(page.getByTestId('confirm-message')), /at most 2 dead letters of orders \/ work/);
    await page.getByTestId('confirm-cancel').click();
    await dialog.waitFor({ state: 'hidden' });
    assert.equal((await deadLetters()).length, DEAD);
    const visibleBefore = (await call('GET', sub('work'))).backlog.visible;

    await page.getByTestId('dlq-redrive').click();
    await page.getByTestId('confirm-ok').click();
    await eventually('two fewer rows', async () => await rows.count() === DEAD - 2);
    assert.match(await text(page.getByTestId('dlq-outcome')), /redrove 2/);
    assert.equal((await deadLetters()).length, DEAD - 2);
    const { backlog } = await call('GET', sub('work'));
    assert.equal(backlog.visible, visibleBefore + 2, 'the redriven messages are visible again');
    await eventually('the visible count', async () => await text(work.getByTestId('sub-visible')) === `${backlog.visible}`);

    // Delete one.
    const doomed = await rows.first().getAttribute('data-id');
    await rows.first().getByTestId('dlq-delete').click();
    assert.match(await text(page.getByTestId('confirm-message')), new RegExp(`Delete dead letter ${doomed}`));
    await page.getByTestId('confirm-ok').click();
    await eventually('one fewer row', async () => await rows.count() === DEAD - 3);
    const left = (await deadLetters()).map((d) => d.id);
    assert.equal(left.length, DEAD - 3);
    assert.ok(!left.includes(doomed), `${doomed} deleted`);

    // Purge.
    await page.getByTestId('dlq-purge').click();
    await page.getByTestId('confirm-ok').click();
    await eventually('an empty dead-letter queue', async () =>
      await rows.count() === 0 && await text(page.getByTestId('dlq-count')) === '0');
    assert.match(await text(page.getByTestId('dlq-outcome')), new RegExp(`purged ${DEAD - 3}`));
    assert.equal((await deadLetters()).length, 0);

    // Messages dead-lettered later show up by themselves.
    await deadLetter(2);
    await eventually('the new dead letters', async () => await rows.count() === 2, 15_000);
  });

  it('seeks and purges a subscription, each after a confirmation showing its dry run', async () => {
    const work = card('subscription', { topic: TOPIC, subscription: 'work' });
    const dialog = page.getByTestId('confirm-dialog');
    const dryRun = () => call('POST', sub('work', '/seek'), { to: 'earliest', dry_run: true });
    const dry = await dryRun();
    await work.getByTestId('sub-seek-to').fill('earliest');
    await work.getByTestId('sub-seek').click();
    await dialog.waitFor({ state: 'visible' });
    assert.equal(await text(page.getByTestId('confirm-message')),
      `Seek orders / work to earliest? Now that is ${dry.redeliver} to redeliver and ${dry.skip} to skip.`);
    await page.getByTestId('confirm-cancel').click();
    await dialog.waitFor({ state: 'hidden' });
    assert.deepEqual(await dryRun(), dry, 'cancelled: nothing moved');

    const dead = (await deadLetters()).length;
    await work.getByTestId('sub-purge').click();
    await dialog.waitFor({ state: 'visible' });
    assert.match(await text(page.getByTestId('confirm-message')),
      /^Purge orders \/ work\? Now that is \d+ to redeliver and \d+ to skip; its dead letters stay\.$/);
    await page.getByTestId('confirm-ok').click();
    await eventually('the purge shown', async () =>
      /^purge: 0 redelivered, \d+ skipped$/.test(await text(work.getByTestId('sub-moved'))));
    const { backlog } = await call('GET', sub('work'));
    assert.deepEqual([backlog.visible, backlog.in_flight, backlog.delayed], [0, 0, 0], 'purged');
    assert.equal((await deadLetters()).length, dead, 'the dead letters stay');
  });

  it('rotates a push target\'s secret after a confirmation, showing the new one and the old one\'s end', async () => {
    const webhook = card('subscription', { topic: TOPIC, subscription: 'webhook' });
    const dialog = page.getByTestId('confirm-dialog');
    await webhook.getByTestId('sub-rotate-secret').click();
    await dialog.waitFor({ state: 'visible' });
    assert.match(await text(page.getByTestId('confirm-message')), /^Rotate the signing secret of orders \/ webhook\?/);
    await page.getByTestId('confirm-cancel').click();
    await dialog.waitFor({ state: 'hidden' });
    const never = await call('GET', sub('webhook'));
    assert.equal(never.push.previous_secret_expires_ms, undefined, 'cancelled: not rotated');
    assert.equal(await webhook.getByTestId('sub-new-secret').count(), 0);

    const before = Date.now();
    await webhook.getByTestId('sub-rotate-secret').click();
    await dialog.waitFor({ state: 'visible' });
    await page.getByTestId('confirm-ok').click();
    const secret = webhook.getByTestId('sub-new-secret');
    await eventually('the new secret shown', async () => await secret.count() === 1);
    assert.match(await text(secret), /^whsec_[A-Za-z0-9+/=]+$/);
    const described = await call('GET', sub('webhook'));
    assert.ok(described.push.previous_secret_expires_ms >= before + 24 * 3600 * 1000, 'the old one signs for 24 h');
    assert.equal(await text(webhook.getByTestId('sub-previous-expires')),
      `the previous one signs too until ${new Date(described.push.previous_secret_expires_ms).toISOString()}`);
    // Shown until hidden, then never again (describe never shows it).
    assert.ok(!JSON.stringify(described).includes(await text(secret)), 'describe does not show the secret');
    await webhook.getByTestId('sub-secret-hide').click();
    await eventually('hidden', async () => await webhook.getByTestId('sub-new-secret').count() === 0);
  });

  it('tails a partition live', async () => {
    await page.getByTestId('tail-topic').selectOption(TOPIC);
    await page.getByTestId('tail-partition').fill('1');
    await page.getByTestId('tail-from').fill('latest');
    await page.getByTestId('tail-start').click();
    const status = page.getByTestId('tail-status');
    await eventually('the tail to start', async () => await status.getAttribute('data-state') === 'running');
    const from = Number(await status.getAttribute('data-from'));
    assert.equal(from, (await call('GET', `/topics/${TOPIC}/partitions/1/offsets?timestamp_ms=latest`)).offset);

    const live = [0, 1, 2].map((n) => ({ partition: 1, key: `live-${n}`, value: { live: n } }));
    await call('POST', `/topics/${TOPIC}/events`, { events: live });
    const tailed = page.getByTestId('tail-event');
    await eventually('three tailed events', async () => await tailed.count() === 3);
    // Newest first.
    assert.deepEqual(await tailed.evaluateAll((lis) => lis.map((li) => Number(li.dataset.offset))), [from + 2, from + 1, from]);
    assert.match(await text(tailed.first()), /live-2.*\{"live":2\}/);
  });

  it('saves a screenshot', async () => {
    // Let the charts gather a few more points, then wait for a fresh refresh to draw them.
    const status = page.getByTestId('refresh-status');
    const before = await text(status);
    await eventually('a refresh', async () => await text(status) !== before);
    await mkdir(path.dirname(screenshot), { recursive: true });
    await page.screenshot({ path: screenshot, fullPage: true });
  });

  it('stops the tail, and shows an API error in the page', async () => {
    await page.getByTestId('tail-stop').click();
    assert.equal(await page.getByTestId('tail-status').getAttribute('data-state'), 'stopped');
    await page.getByTestId('tail-from').fill('999999');
    await page.getByTestId('tail-start').click();
    const error = page.locator('[data-testid=error][data-source=tail]');
    await eventually('the tail\'s error', async () => /offset_out_of_range \(HTTP 416\)/.test(await text(error)));
    assert.equal(await page.getByTestId('tail-status').getAttribute('data-state'), 'failed');
  });

  it('logs no console errors and no page errors', () => {
    // The 416 and the 400 above are logged by Chromium itself for the failed requests;
    // nothing else may be.
    const unexpected = consoleErrors.filter((message) => !EXPECTED_416.test(message) && !EXPECTED_400.test(message));
    assert.deepEqual(unexpected, []);
    assert.equal(consoleErrors.filter((m) => EXPECTED_416.test(m)).length, 1, 'the one 416 of the error check');
    assert.equal(consoleErrors.filter((m) => EXPECTED_400.test(m)).length, 1, 'the one refused setting');
    assert.deepEqual(pageErrors, []);
  });
});
