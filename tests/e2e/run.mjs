// End-to-end driver: makes a tiny random model with `sluice make-model`,
// starts `sluice serve` on a free loopback port, waits for /health (bounded
// poll), runs every *.test.mjs here against it, sends SIGTERM and checks the
// server drains and exits 0.
//
//   node tests/e2e/run.mjs build/sluice
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { spawnServer } from './helpers.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const sluice = resolve(process.argv[2] ?? 'build/sluice');
const only = process.argv[3];  // optional substring filter on test names
const work = mkdtempSync(join(tmpdir(), 'sluice-e2e-'));
const modelDir = join(work, 'model');

// Big enough that a 4000-token generation takes well over the time a client
// needs to disconnect; small enough to load in milliseconds.
execFileSync(sluice, ['make-model', '--arch', 'llama', '--layers', '4', '--hidden', '256', '--heads', '8',
  '--kv-heads', '4', '--intermediate', '688', '--vocab', '2048', '--seed', '1', '--out', modelDir],
  { stdio: 'inherit' });

export const API_KEY = 'e2e-secret-key';
const { baseURL, server, exited } = await spawnServer({ sluice }, ['--model', modelDir, '--api-key', API_KEY,
  '--served-model-name', 'tiny', 'tiny-alias', '--max-model-len', '4096', '--threads', '1',
  '--kv-cache-memory', String(64 << 20)]);

const ctx = { baseURL, apiKey: API_KEY, model: 'tiny', sluice, modelDir, server };
let failures = 0;
let passed = 0;
const files = readdirSync(here).filter((f) => f.endsWith('.test.mjs')).sort();
for (const file of files) {
  const mod = await import(pathToFileURL(join(here, file)).href);
  for (const [name, fn] of Object.entries(mod.tests)) {
    if (only && !name.includes(only)) continue;
    const started = Date.now();
    try {
      await fn(ctx);
      ++passed;
      console.log(`ok   ${file} ${name} (${Date.now() - started} ms)`);
    } catch (error) {
      ++failures;
      console.log(`FAIL ${file} ${name}: ${error?.stack ?? error}`);
    }
    // After each test the server must still be up and answering. A test that
    // blocks the event loop (spawnSync) past the server's 60 s idle timeout on
    // a loaded machine leaves a pooled connection the server has closed: a
    // connection error is retried once, on a fresh connection.
    const probe = () => fetch(`${baseURL}/health`).catch((e) => ({ status: String(e) }));
    let health = await probe();
    if (typeof health.status === 'string') health = await probe();
    if (health.status !== 200) {
      ++failures;
      console.log(`FAIL server unhealthy after ${name}: ${health.status}`);
    }
  }
}

// SIGTERM with a stream in flight: the stream ends with [DONE], the server exits 0.
const drain = await import(pathToFileURL(join(here, 'drain.mjs')).href);
try {
  await drain.sigtermWithStreamInFlight(ctx, exited);
  ++passed;
  console.log('ok   drain on SIGTERM');
} catch (error) {
  ++failures;
  console.log(`FAIL drain on SIGTERM: ${error?.stack ?? error}`);
  server.kill('SIGKILL');
}
rmSync(work, { recursive: true, force: true });
console.log(`${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
