// Shared helpers for the e2e tests: an openai client, raw HTTP, SSE parsing, metrics,
// the JSON-prefix oracle.
import OpenAI from 'openai';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

export function client(ctx, apiKey = ctx.apiKey) {
  return new OpenAI({ baseURL: `${ctx.baseURL}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
}

export async function raw(ctx, path, { method = 'POST', body, headers = {}, auth = true } = {}) {
  const h = { 'content-type': 'application/json', ...headers };
  if (auth) h.authorization = `Bearer ${ctx.apiKey}`;
  const response = await fetch(`${ctx.baseURL}${path}`, { method, headers: h, body });
  const text = await response.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: response.status, headers: response.headers, text, json };
}

export function assertErrorEnvelope(result, status, code) {
  assert.equal(result.status, status, result.text);
  assert.ok(result.json?.error, `no error envelope: ${result.text}`);
  for (const key of ['message', 'type', 'param', 'code']) assert.ok(key in result.json.error, `error.${key} missing`);
  if (code !== undefined) assert.equal(result.json.error.code, code, result.text);
}

// All `data:` payloads of an SSE body, in order ("[DONE]" kept as a string).
export function sseData(text) {
  return text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6))
    .map((d) => (d === '[DONE]' ? d : JSON.parse(d)));
}

export async function metrics(ctx) {
  const r = await raw(ctx, '/metrics', { method: 'GET' });
  assert.equal(r.status, 200);
  const values = {};
  for (const line of r.text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    values[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return values;
}

export function metric(values, name, labels = '') {
  const key = `${name}{model_name="tiny"${labels}}`;
  assert.ok(key in values, `metric ${key} missing`);
  return values[key];
}

// Polls until `predicate()` holds; bounded.
export async function eventually(predicate, what, attempts = 250) {
  for (let i = 0; i < attempts; ++i) {
    if (await predicate()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`timed out waiting for ${what}`);
}

// `sluice serve` on a free loopback port: the shared server, and second ones
// for tests that need other flags (one HTTP thread, another chat template).
// Resolves once /health is 200 (bounded poll, failing fast if the process
// exits); stop() sends SIGTERM and expects exit code 0.
// `logLevel` 'info' keeps the start-up log (each flag's value), read back by log().
export async function spawnServer(ctx, args, { logLevel = 'warn' } = {}) {
  const { spawn } = await import('node:child_process');
  const server = spawn(ctx.sluice, ['serve', '--port', '0', '--stats-log-interval', '0', '--log-level', logLevel,
    '--shutdown-timeout', '1', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((res) => server.on('exit', (code, signal) => res({ code, signal })));
  let buffered = '';
  const port = await new Promise((res, rej) => {
    server.stdout.on('data', (data) => {
      buffered += data.toString();
      const m = buffered.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) res(Number(m[1]));
    });
    exited.then((e) => rej(new Error(`server exited before listening: ${JSON.stringify(e)}`)));
  });
  const baseURL = `http://127.0.0.1:${port}`;
  // Bounded readiness poll: /health is 503 while the model loads.
  let ready = false;
  let gone = false;
  exited.then(() => { gone = true; });
  for (let attempt = 0; attempt < 600 && !ready && !gone; ++attempt) {
    ready = await fetch(`${baseURL}/health`).then((r) => r.status === 200, () => false);
    if (!ready) await new Promise((r) => setTimeout(r, 20));
  }
  if (!ready) {
    server.kill('SIGKILL');
    throw new Error(gone ? 'server exited before it became healthy' : 'server never became healthy');
  }
  return {
    baseURL,
    server,
    exited,
    log: () => buffered,
    async stop() {
      server.kill('SIGTERM');
      const e = await exited;
      assert.equal(e.code, 0, `server exit: ${JSON.stringify(e)}`);
    },
  };
}

// JSON-mode answers judged by the JSON-prefix oracle (tests/support/json_prefix.py,
// Python's json module as the judge; ctest json_prefix_oracle tests it): each
// answer is a prefix of some JSON document (cut off at max_tokens or not), and a
// whole one when it ended with finish_reason "stop". One Python run for all.
export function assertJsonPrefixes(answers) {
  const script = new URL('../support/json_prefix.py', import.meta.url).pathname;
  const input = JSON.stringify({ texts: answers.map((a) => Buffer.from(a.text, 'utf8').toString('hex')) });
  const run = spawnSync('/usr/bin/python3', [script], { input, encoding: 'utf8', timeout: 30_000 });
  assert.equal(run.status, 0, `json_prefix.py failed: ${run.stderr}`);
  const verdicts = JSON.parse(run.stdout);
  assert.equal(verdicts.length, answers.length);
  answers.forEach((a, i) => {
    assert.ok(verdicts[i].prefix, `not a prefix of any JSON document (${a.finish_reason}): ${a.text}`);
    if (a.finish_reason === 'stop') assert.ok(verdicts[i].complete, `stopped, but not a whole document: ${a.text}`);
  });
}
