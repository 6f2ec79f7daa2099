// SSE streaming load against a real `sluice serve`: N concurrent streaming
// completions over loopback sockets, every token one SSE event, on the sim
// backend without pacing (--device sim --sim-speed 0) so the engine is never
// what limits the rate. Measures the server's CPU time (all threads, and the
// HTTP threads alone, from /proc/PID/task/*/stat) per streamed token.
//
//   node bench/server/sse_load.mjs build/sluice [streams=256] [tokens_per_stream=512] [api_threads=1]
//        [sim_profile=''] [sim_speed=0]
//
// With --sim-speed 0 the engine outruns the stream and the server coalesces
// several tokens into one SSE event (backpressure); with a paced sim
// (e.g. llama-3-8b at speed 1, ~13 ms per 256-sequence decode step) every
// token is its own event. Tokens are counted from the usage chunk, events from
// the data lines; both are reported.
//
// A benchmark, not a test: it prints numbers for docs/benchmarks.md.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const sluice = resolve(process.argv[2] ?? 'build/sluice');
const numStreams = Number(process.argv[3] ?? 256);
const tokensPerStream = Number(process.argv[4] ?? 512);
const apiThreads = Number(process.argv[5] ?? 1);
const simProfile = process.argv[6] ?? '';
const simSpeed = process.argv[7] ?? '0';
const work = mkdtempSync(join(tmpdir(), 'sluice-sse-load-'));
const modelDir = join(work, 'model');
execFileSync(sluice, ['make-model', '--arch', 'llama', '--layers', '4', '--hidden', '256', '--heads', '8',
  '--kv-heads', '4', '--intermediate', '688', '--vocab', '2048', '--seed', '1', '--out', modelDir]);

const server = spawn(sluice, ['serve', '--model', modelDir, '--device', 'sim', '--sim-speed', simSpeed, '--port', '0',
  ...(simProfile ? ['--sim-profile', simProfile, '--kv-cache-memory', String(64e9)] : []),
  '--api-threads', String(apiThreads), '--max-num-seqs', String(numStreams), '--max-model-len', '4096',
  '--max-num-queued-reqs', String(4 * numStreams), '--stats-log-interval', '0', '--log-level', 'warn',
  '--served-model-name', 'm'], { stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise((res, rej) => {
  let out = '';
  server.stdout.on('data', (d) => {
    out += d;
    const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) res(Number(m[1]));
  });
  server.on('exit', (code) => rej(new Error(`server exited (${code})`)));
});
for (let i = 0; i < 500; ++i) {
  const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status === 200, () => false);
  if (ok) break;
  await new Promise((r) => setTimeout(r, 20));
}

const ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim());
// CPU seconds of the server process, in total and for threads named sluice-http.
function cpu() {
  let total = 0;
  let httpThreads = 0;
  for (const tid of readdirSync(`/proc/${server.pid}/task`)) {
    let stat;
    try { stat = readFileSync(`/proc/${server.pid}/task/${tid}/stat`, 'utf8'); } catch { continue; }
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const seconds = (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;  // utime + stime
    total += seconds;
    if (name === 'sluice-http') httpThreads += seconds;
  }
  return { total, http: httpThreads };
}

const agent = new http.Agent({ keepAlive: true, maxSockets: numStreams });
function stream(i) {
  const body = JSON.stringify({ model: 'm', prompt: `stream ${i}: once upon a time`, max_tokens: tokensPerStream,
    ignore_eos: true, stream: true, stream_options: { include_usage: true } });
  return new Promise((res, rej) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (response) => {
      if (response.statusCode !== 200) return rej(new Error(`status ${response.statusCode}`));
      let events = 0;
      let tokens = 0;
      let tail = '';
      response.setEncoding('utf8');
      response.on('data', (chunk) => {
        const text = tail + chunk;
        const parts = text.split('\n\n');
        tail = parts.pop();
        for (const e of parts) {
          if (!e.startsWith('data: {')) continue;
          const chunk = JSON.parse(e.slice(6));
          if (chunk.usage) tokens = chunk.usage.completion_tokens;
          else ++events;
        }
      });
      response.on('end', () => res({ events, tokens }));
      response.on('error', rej);
    });
    req.on('error', rej);
    req.end(body);
  });
}

// Warm-up (first connections, allocator), then the measured round.
await Promise.all(Array.from({ length: 8 }, (_, i) => stream(i)));
const cpuBefore = cpu();
const t0 = process.hrtime.bigint();
const counts = await Promise.all(Array.from({ length: numStreams }, (_, i) => stream(i)));
const wallS = Number(process.hrtime.bigint() - t0) / 1e9;
const cpuAfter = cpu();
const numEvents = counts.reduce((a, c) => a + c.events, 0);
const numTokens = counts.reduce((a, c) => a + c.tokens, 0);
const serverCpuS = cpuAfter.total - cpuBefore.total;
const httpCpuS = cpuAfter.http - cpuBefore.http;
const result = {
  streams: numStreams, tokens_per_stream: tokensPerStream, api_threads: apiThreads,
  sim_profile: simProfile || '(model dir)', sim_speed: Number(simSpeed),
  streamed_tokens: numTokens, sse_events: numEvents, wall_s: +wallS.toFixed(3),
  streamed_tokens_per_wall_s: Math.round(numTokens / wallS),
  server_cpu_s: +serverCpuS.toFixed(3), http_threads_cpu_s: +httpCpuS.toFixed(3),
  tokens_per_server_cpu_s: Math.round(numTokens / serverCpuS),
  tokens_per_http_thread_cpu_s: httpCpuS > 0 ? Math.round(numTokens / httpCpuS) : null,
  events_per_http_thread_cpu_s: httpCpuS > 0 ? Math.round(numEvents / httpCpuS) : null,
};
console.log(JSON.stringify(result, null, 2));
server.kill('SIGTERM');
await new Promise((r) => server.on('exit', r));
agent.destroy();
rmSync(work, { recursive: true, force: true });
if (numTokens !== numStreams * tokensPerStream) {
  console.error(`expected ${numStreams * tokensPerStream} tokens, got ${numTokens}`);
  process.exit(1);
}
