// The server's share of time-to-first-token for a very long prompt: a real
// `sluice serve --device sim` (DeepSeek-V4.1-Flash's cost profile, 1M-token
// context, no pacing) gets one streaming completion whose prompt is ~300k
// tokens; the server splits the first token's latency into tokenization, the
// engine's time (submit -> first output pushed: queue and every prefill step)
// and the rest, which is the server's own overhead (JSON parse of the body,
// validation, worker and strand hand-offs, detokenizing and writing the first
// chunk). The split is read from the server's debug line and from
// sluice:time_to_first_token_server_overhead_seconds.
//
//   node bench/server/ttft_long_prompt.mjs build/sluice [prompt_tokens=300000] [rounds=5]
//
// A benchmark, not a test: it prints numbers for docs/benchmarks.md.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const sluice = resolve(process.argv[2] ?? 'build/sluice');
const targetTokens = Number(process.argv[3] ?? 300000);
const rounds = Number(process.argv[4] ?? 5);
const work = mkdtempSync(join(tmpdir(), 'sluice-ttft-'));
const modelDir = join(work, 'model');
execFileSync(sluice, ['make-model', '--arch', 'llama', '--layers', '4', '--hidden', '256', '--heads', '8',
  '--kv-heads', '4', '--intermediate', '688', '--vocab', '2048', '--seed', '1', '--out', modelDir]);

const server = spawn(sluice, ['serve', '--model', modelDir, '--device', 'sim', '--sim-profile', 'deepseek-v4.1-flash',
  '--sim-speed', '0', '--max-model-len', String(targetTokens + 20000), '--kv-cache-memory', String(1e9),
  '--max-request-body-bytes', String(64 << 20), '--port', '0', '--stats-log-interval', '0', '--log-level', 'debug',
  '--served-model-name', 'm'], { stdio: ['ignore', 'pipe', 'inherit'] });
// spdlog writes to stdout, after the "listening on" line.
const lines = [];
let tail = '';
const port = await new Promise((res, rej) => {
  let out = '';
  server.stdout.on('data', (d) => {
    out += d;
    const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) res(Number(m[1]));
    tail += d;
    const parts = tail.split('\n');
    tail = parts.pop();
    for (const l of parts) if (l.includes('first token after')) lines.push(l);
  });
  server.on('exit', (code) => rej(new Error(`server exited (${code})`)));
});
const base = `http://127.0.0.1:${port}`;
for (let i = 0; i < 500; ++i) {
  if (await fetch(`${base}/health`).then((r) => r.status === 200, () => false)) break;
  await new Promise((r) => setTimeout(r, 20));
}

// Words from a fixed pseudo-random sequence; a different seed per round so the
// prefix cache never serves the prompt.
function text(seed, numWords) {
  let x = seed >>> 0;
  const words = [];
  for (let i = 0; i < numWords; ++i) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    const len = 2 + (x >>> 28) % 7;
    let w = '';
    for (let k = 0; k < len; ++k) w += String.fromCharCode(97 + ((x >>> (k * 3)) % 26));
    words.push(w);
  }
  return words.join(' ');
}
async function count(prompt) {
  const r = await fetch(`${base}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt }) });
  return (await r.json()).count;
}
const sampleWords = 2000;
const tokensPerWord = (await count(text(1, sampleWords))) / sampleWords;
const numWords = Math.round(targetTokens / tokensPerWord);

const results = [];
for (let round = 0; round < rounds; ++round) {
  const prompt = text(1000 + round, numWords);
  const before = lines.length;
  const response = await fetch(`${base}/v1/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt, max_tokens: 1, stream: true }) });
  const body = await response.text();
  if (response.status !== 200 || !body.includes('[DONE]')) throw new Error(`round ${round}: ${response.status} ${body}`);
  for (let i = 0; i < 100 && lines.length === before; ++i) await new Promise((r) => setTimeout(r, 10));
  const m = lines[before]?.match(/first token after ([\d.]+) ms = tokenize ([\d.]+) \+ engine \(submit to first output\) ([\d.]+) \+ server ([\d.]+) \((\d+) prompt tokens; server: (.*)\)/);
  if (!m) throw new Error(`no timing line for round ${round}`);
  results.push({ prompt_tokens: Number(m[5]), ttft_ms: Number(m[1]), tokenize_ms: Number(m[2]),
    engine_ms: Number(m[3]), server_overhead_ms: Number(m[4]), server_split: m[6],
    body_bytes: Buffer.byteLength(prompt) });
}
const overheads = results.map((r) => r.server_overhead_ms).sort((a, b) => a - b);
console.log(JSON.stringify({ rounds: results, median_server_overhead_ms: overheads[Math.floor(overheads.length / 2)],
  max_server_overhead_ms: overheads[overheads.length - 1] }, null, 2));
server.kill('SIGTERM');
await new Promise((r) => server.on('exit', r));
rmSync(work, { recursive: true, force: true });
