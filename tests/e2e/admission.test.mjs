// Bounded admission: with one running slot and a queue of one, a third
// request is refused at once with 503 + Retry-After (gateways fail over on it),
// and the server keeps serving. Runs its own server with those caps.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { raw, eventually } from './helpers.mjs';

async function startServer(ctx, extraArgs) {
  const server = spawn(ctx.sluice, ['serve', '--model', ctx.modelDir, '--port', '0', '--api-key', ctx.apiKey,
    '--served-model-name', 'tiny', '--threads', '1', '--stats-log-interval', '0', '--log-level', 'warn',
    '--kv-cache-memory', String(64 << 20), '--shutdown-timeout', '0', ...extraArgs],
  { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((res) => server.on('exit', (code) => res(code)));
  const port = await new Promise((res, rej) => {
    let buffered = '';
    server.stdout.on('data', (d) => {
      buffered += d.toString();
      const m = buffered.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) res(Number(m[1]));
    });
    exited.then(() => rej(new Error('server exited')));
  });
  const sub = { ...ctx, baseURL: `http://127.0.0.1:${port}` };
  await eventually(async () => (await fetch(`${sub.baseURL}/health`).catch(() => ({}))).status === 200, 'health');
  return { sub, server, exited };
}

export const tests = {
  async 'keep-alive comments during a long prefill, before the first data line'(ctx) {
    const { sub, server, exited } = await startServer(ctx, ['--sse-keepalive-interval', '0.01']);
    try {
      const prompt = Array.from({ length: 400 }, (_, i) => (i * 7919) % 2000);
      const r = await raw(sub, '/v1/completions', { body: JSON.stringify({ model: 'tiny', prompt, max_tokens: 1,
        stream: true }) });
      assert.equal(r.status, 200);
      const firstComment = r.text.indexOf(': keep-alive\n\n');
      assert.ok(firstComment >= 0, 'no keep-alive comment');
      assert.ok(firstComment < r.text.indexOf('data: '), 'keep-alive only after the first data line');
      assert.ok(r.text.endsWith('data: [DONE]\n\n'));
    } finally {
      server.kill('SIGTERM');
      assert.equal(await exited, 0);
    }
  },

  async 'queue full is a fast 503 with Retry-After'(ctx) {
    const { sub, server, exited } = await startServer(ctx, ['--max-num-seqs', '1', '--max-num-queued-reqs', '1']);
    try {
      // Three long streams at once: one runs, at most one waits, the rest are refused.
      const long = JSON.stringify({ model: 'tiny', prompt: 'x', max_tokens: 3000, ignore_eos: true, stream: true });
      const controllers = [0, 1, 2].map(() => new AbortController());
      const started = Date.now();
      const responses = await Promise.all(controllers.map((c) => fetch(`${sub.baseURL}/v1/completions`, {
        method: 'POST', body: long, signal: c.signal,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ctx.apiKey}` } })));
      const refused = responses.filter((r) => r.status === 503);
      assert.ok(refused.length >= 1, `statuses ${responses.map((r) => r.status)}`);
      assert.ok(responses.some((r) => r.status === 200), `statuses ${responses.map((r) => r.status)}`);
      for (const r of refused) {
        assert.ok(Number(r.headers.get('retry-after')) >= 1);
        assert.ok(!/event-stream/.test(r.headers.get('content-type')));
        const body = await r.json();
        assert.ok(body.error.message && 'code' in body.error);
      }
      assert.ok(Date.now() - started < 5000);
      for (const c of controllers) c.abort();
      // Once the aborted streams are gone, the server admits again.
      await eventually(async () => (await raw(sub, '/v1/completions',
        { body: JSON.stringify({ model: 'tiny', prompt: 'y', max_tokens: 2 }) })).status === 200, 'admission again');
    } finally {
      server.kill('SIGTERM');
      assert.equal(await exited, 0);
    }
  },
};
