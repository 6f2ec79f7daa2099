// Bounded request fuzzer against the real `sluice serve` (ctest server_fuzz).
//
// A tiny random model, a short context (so any generation is quick), and a
// few thousand requests made by mutating valid ones: field types, numeric
// ranges, deep nesting, unicode (lone surrogates, invalid UTF-8 bytes), sizes
// past the body limit, truncated bodies, bodies cut off by the client's end of
// stream, and slow senders that trickle a body in pieces. Every request goes
// over its own connection (Connection: close) so each one is seen to end.
//
// What must hold (the oracle is the HTTP exchange itself and /metrics):
//   - every request is answered 2xx or 4xx before its deadline, with a whole
//     response (Content-Length bytes, or a chunked body that ends), and the
//     server closes the connection after it;
//   - /health stays 200 throughout and after;
//   - afterwards vllm:num_requests_running and _waiting return to 0 and the
//     only open connection is the one reading /metrics.
//
//   node tests/e2e/fuzz.mjs build/sluice [num_requests] [seed]
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

import { spawnServer } from './helpers.mjs';

const sluice = resolve(process.argv[2] ?? 'build/sluice');
const numRequests = Number(process.argv[3] ?? 3000);
const seed = Number(process.argv[4] ?? 20240611);
const kConcurrency = 8;
const kDeadlineMs = 15_000;
const kMaxBodyBytes = 64 << 10;
const kMaxSlowPieces = 4;
const kMaxSlowDelayMs = 5;

// mulberry32: a seeded generator, so a failure reproduces with its seed.
function rng(s) {
  return () => {
    s = (s + 0x6D2B79F5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = rng(seed);
const int = (n) => Math.floor(random() * n);
const pick = (list) => list[int(list.length)];
const chance = (p) => random() < p;

const work = mkdtempSync(join(tmpdir(), 'sluice-fuzz-'));
const modelDir = join(work, 'model');
execFileSync(sluice, ['make-model', '--arch', 'llama', '--layers', '2', '--hidden', '64', '--heads', '4',
  '--kv-heads', '2', '--intermediate', '128', '--vocab', '2048', '--seed', '3', '--out', modelDir], { stdio: 'inherit' });
const server = await spawnServer({ sluice }, ['--model', modelDir, '--served-model-name', 'tiny',
  '--max-model-len', '192', '--threads', '1', '--kv-cache-memory', String(8 << 20), '--max-n', '4',
  '--max-request-body-bytes', String(kMaxBodyBytes), '--sse-keepalive-interval', '0']);
const port = Number(new URL(server.baseURL).port);

// ---- valid requests -------------------------------------------------------

const words = ['hello', 'world', 'tool', 'weather', 'ünïcödé', '日本語', '🙂', 'a\nb', '"quoted"', '\\'];
const text = () => Array.from({ length: 1 + int(6) }, () => pick(words)).join(' ');
const tools = () => [{ type: 'function', function: { name: 'get_weather', description: 'w',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

function validChat() {
  const body = { model: 'tiny', messages: [{ role: 'user', content: text() }], max_tokens: 1 + int(8) };
  if (chance(0.3)) body.messages.unshift({ role: pick(['system', 'developer']), content: text() });
  if (chance(0.2)) body.messages.push({ role: 'assistant', content: text() }, { role: 'user', content: text() });
  if (chance(0.3)) body.stream = true;
  if (chance(0.2)) body.stream_options = { include_usage: true };
  if (chance(0.3)) body.temperature = random() * 2;
  if (chance(0.2)) body.top_p = 0.1 + random() * 0.9;
  if (chance(0.2)) body.top_k = int(50);
  if (chance(0.2)) body.seed = int(1000);
  if (chance(0.2)) body.n = 1 + int(3);
  if (chance(0.1)) { body.logprobs = true; body.top_logprobs = int(5); }
  if (chance(0.1)) body.stop = [text()];
  if (chance(0.1)) body.logit_bias = { [int(500)]: random() * 200 - 100, [int(500)]: -100 };
  if (chance(0.1)) { body.tools = tools(); body.tool_choice = pick(['none', 'required']); }
  if (chance(0.1)) body.response_format = { type: 'json_object' };
  if (chance(0.05)) body.response_format = { type: 'json_schema',
    json_schema: { name: 's', schema: { type: 'object', properties: { a: { type: 'integer' } } } } };
  return { path: '/v1/chat/completions', body };
}

function validCompletion() {
  const body = { model: 'tiny', prompt: chance(0.7) ? text() : [1 + int(100), 1 + int(100)], max_tokens: 1 + int(8) };
  if (chance(0.2)) body.prompt = [text(), text()];
  if (chance(0.3)) body.stream = true;
  if (chance(0.2)) body.logprobs = int(4);
  if (chance(0.2)) body.min_tokens = int(2);
  if (chance(0.2)) body.ignore_eos = true;
  if (chance(0.2)) body.presence_penalty = random() * 4 - 2;
  if (chance(0.2)) body.repetition_penalty = 0.5 + random();
  return { path: '/v1/completions', body };
}

function validOther() {
  return pick([
    { path: '/tokenize', body: { model: 'tiny', prompt: text() } },
    { path: '/tokenize', body: { model: 'tiny', messages: [{ role: 'user', content: text() }] } },
    { path: '/detokenize', body: { model: 'tiny', tokens: [1, 2, 3] } },
  ]);
}

// ---- mutations ------------------------------------------------------------

const oddValues = () => [0, -1, 1, 2.5, -0.5, 1e308, -1e308, 2 ** 31, 2 ** 53, 2 ** 64, 1e-320, '', 'x',
  '\u0000', true, false, null, [], {}, [null], { a: 1 }, 'a'.repeat(1 + int(2000)), [1, 'a', null]];
const fields = ['model', 'messages', 'prompt', 'max_tokens', 'max_completion_tokens', 'min_tokens', 'n', 'best_of',
  'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'presence_penalty', 'frequency_penalty', 'repetition_penalty',
  'logprobs', 'top_logprobs', 'stop', 'stop_token_ids', 'stream', 'stream_options', 'tools', 'tool_choice',
  'response_format', 'logit_bias', 'chat_template_kwargs', 'reasoning_effort', 'ignore_eos', 'skip_special_tokens',
  'add_generation_prompt', 'echo', 'suffix', 'tokens', 'user', 'unknown_field'];

function deep(depth, leaf) {
  let v = leaf;
  for (let i = 0; i < depth; ++i) v = chance(0.5) ? [v] : { k: v };
  return v;
}

function randomString() {
  const parts = ['a', 'é', '日', '🙂', '\u200b', '\ufffd', '\u2028', '<think>', '</think>', '<tool_call>',
    '{"name":', '\n', '\t', '"', '\\'];
  return Array.from({ length: 1 + int(20) }, () => pick(parts)).join('');
}

// Somewhere inside the value: a path of keys and indices to a random node.
function nodes(value, out = [], path = []) {
  out.push(path);
  if (value && typeof value === 'object' && path.length < 6)
    for (const key of Object.keys(value)) nodes(value[key], out, [...path, key]);
  return out;
}

function setAt(root, path, v) {
  if (path.length === 0) return v;
  let node = root;
  for (const key of path.slice(0, -1)) node = node[key];
  node[path.at(-1)] = v;
  return root;
}

// Boundary values of the numeric fields ("n": 0 once hung a request).
const numericFields = ['n', 'best_of', 'max_tokens', 'max_completion_tokens', 'min_tokens', 'temperature', 'top_p',
  'top_k', 'min_p', 'seed', 'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'logprobs', 'top_logprobs'];
const boundaryValues = [0, -1, 0.5, -0.0, 1.0, 2 ** 31, 2 ** 63, 2 ** 64, 1e308, null];

function mutateValue(body) {
  const b = structuredClone(body);
  switch (int(7)) {
    case 0: b[pick(fields)] = pick(oddValues()); return b;
    case 1: delete b[pick(Object.keys(b))]; return b;
    case 2: return setAt(b, pick(nodes(b)), pick(oddValues()));
    case 3: return setAt(b, pick(nodes(b)), deep(1 + int(600), pick([1, 'x', null, {}])));
    case 4: return setAt(b, pick(nodes(b)), randomString());
    case 5: b[pick(fields)] = chance(0.5) ? 'y'.repeat(int(kMaxBodyBytes * 2)) : Array(int(5000)).fill(text());
      return b;
    default: for (let i = 0; i < 3; ++i) b[pick(fields)] = pick(oddValues()); return b;
  }
}

// Text-level mutations: JSON no serializer writes.
function mutateText(json) {
  const at = int(json.length + 1);
  switch (int(6)) {
    case 0: return Buffer.from(json.slice(0, at));  // truncated JSON
    case 1: return Buffer.from(json.slice(0, at) + pick(['}', ']', ',', ':', '"', 'NaN', 'Infinity', '\\u', '\\ud800',
      '\\udc00"', '1e999', '-', '00', '\u0001', ' ', '{}']) + json.slice(at));
    case 2: return Buffer.concat([Buffer.from(json.slice(0, at)),
      Buffer.from([pick([0xff, 0xc3, 0xe2, 0xf0, 0x80, 0xed])]), Buffer.from(json.slice(at))]);  // invalid UTF-8
    case 3: return Buffer.from(json.replaceAll(pick(['"', ':', ',', '[', '{']), pick(['', ' ', '""'])));
    case 4: return Buffer.from(`\ufeff${json}`);  // BOM
    default: return Buffer.from(json + json);  // two documents
  }
}

function makeRequest() {
  const base = pick([validChat, validChat, validCompletion, validCompletion, validOther])();
  let body = base.body;
  const roll = random();
  let bytes;
  if (roll < 0.15) bytes = Buffer.from(JSON.stringify(body));
  else if (roll < 0.45) bytes = Buffer.from(JSON.stringify({ ...body, [pick(numericFields)]: pick(boundaryValues) }));
  else if (roll < 0.75) bytes = Buffer.from(JSON.stringify(mutateValue(body)));
  else bytes = mutateText(JSON.stringify(chance(0.5) ? mutateValue(body) : body));
  const transport = pick(['whole', 'whole', 'whole', 'slow', 'cut', 'short-length', 'chunked']);
  const method = chance(0.02) ? pick(['GET', 'PUT', 'DELETE']) : 'POST';
  const path = chance(0.02) ? pick(['/v1/nope', '/v1/chat/completions?x=1', '/v1/../metrics', '/health']) : base.path;
  return { path, method, bytes, transport };
}

// ---- one exchange over a raw socket ----------------------------------------

// Resolves with { status, complete } once the server closes; rejects on the deadline.
function exchange({ path, method, bytes, transport }) {
  return new Promise((resolvePromise, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const received = [];
    const deadline = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${kDeadlineMs} ms (${transport} ${method} ${path}, ${bytes.length} bytes: ` +
        `${bytes.subarray(0, 200).toString('latin1')})`));
    }, kDeadlineMs);
    const chunked = transport === 'chunked';
    let head = `${method} ${path} HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/json\r\nConnection: close\r\n`;
    // 'short-length': the head announces more than is sent, then the client ends its side.
    const announced = transport === 'short-length' ? bytes.length + 1 + int(100) : bytes.length;
    head += chunked ? 'Transfer-Encoding: chunked\r\n\r\n' : `Content-Length: ${announced}\r\n\r\n`;
    socket.on('data', (d) => received.push(d));
    socket.on('error', () => {});  // judged by what was received before the close
    socket.on('close', () => {
      clearTimeout(deadline);
      resolvePromise(parseResponse(Buffer.concat(received)));
    });
    socket.on('connect', async () => {
      const payload = chunked ? Buffer.concat([Buffer.from(`${bytes.length.toString(16)}\r\n`), bytes,
        Buffer.from('\r\n0\r\n\r\n')]) : bytes;
      if (transport === 'slow') {
        socket.write(head);
        const pieces = 1 + int(kMaxSlowPieces);
        const size = Math.ceil(payload.length / pieces);
        for (let i = 0; i < pieces && !socket.destroyed; ++i) {
          await new Promise((r) => setTimeout(r, int(kMaxSlowDelayMs + 1)));
          socket.write(payload.subarray(i * size, (i + 1) * size));
        }
      } else if (transport === 'cut' && payload.length > 0) {
        // The body stops part way and the client ends its side. (An empty
        // body cannot be cut: ending the side after a whole request reads as
        // a client that left, which the server answers by aborting, so that
        // one goes whole.)
        socket.write(Buffer.concat([Buffer.from(head), payload.subarray(0, int(payload.length))]));
        socket.end();
      } else {
        socket.write(Buffer.concat([Buffer.from(head), payload]));
        if (transport === 'short-length') socket.end();
      }
    });
  });
}

// Status and whether the body is whole: Content-Length bytes, or chunks up to the last one.
function parseResponse(buffer) {
  const end = buffer.indexOf('\r\n\r\n');
  if (end < 0) return { status: 0, complete: false, raw: buffer.toString('latin1').slice(0, 200) };
  const headText = buffer.subarray(0, end).toString('latin1');
  const status = Number(headText.split(' ')[1]);
  const body = buffer.subarray(end + 4);
  const length = headText.match(/\r\ncontent-length: (\d+)/i);
  let complete;
  if (length) complete = body.length === Number(length[1]);
  else complete = /\r\ntransfer-encoding: chunked/i.test(headText) && body.toString('latin1').endsWith('0\r\n\r\n');
  return { status, complete, raw: headText.slice(0, 200) };
}

// ---- the run --------------------------------------------------------------

// A failed fetch (the server gone) is a status of 0, judged like any other.
async function get(pathname) {
  try {
    const r = await fetch(`${server.baseURL}${pathname}`, { signal: AbortSignal.timeout(kDeadlineMs) });
    return { status: r.status, text: await r.text() };
  } catch (error) {
    return { status: 0, text: String(error.cause ?? error) };
  }
}

async function gauges() {
  const { text: page } = await get('/metrics');
  const value = (name) => Number(page.match(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm'))?.[1]);
  return { running: value('vllm:num_requests_running'), waiting: value('vllm:num_requests_waiting'),
    connections: value('sluice:http_connections_open') };
}

const failures = [];
let serverExit;  // set if the server dies: the run stops there
let stopping = false;
server.exited.then((e) => {
  if (stopping) return;
  serverExit = e;
  failures.push(`the server exited during the run: ${JSON.stringify(e)}`);
});
const statuses = new Map();
const started = Date.now();
let next = 0;
async function worker() {
  while (next < numRequests && !serverExit) {
    const index = next++;
    const request = makeRequest();
    try {
      const r = await exchange(request);
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      const answered = r.status >= 200 && r.status < 500 && r.complete;
      if (!answered) failures.push(`#${index} ${request.transport} ${request.method} ${request.path}: status ` +
        `${r.status} complete=${r.complete} ${r.raw} body: ${request.bytes.subarray(0, 300).toString('latin1')}`);
    } catch (error) {
      failures.push(`#${index}: ${error.message}`);
    }
    if (index % 500 === 499) {
      const health = await get('/health');
      if (health.status !== 200) failures.push(`/health ${health.status} after ${index + 1} requests`);
    }
  }
}
try {
  await Promise.all(Array.from({ length: kConcurrency }, worker));
  const health = await get('/health');
  if (health.status !== 200) throw new Error(`/health after the run: ${health.status} ${health.text}`);
  // Bounded: aborted or finishing requests leave the engine within a few seconds.
  let last;
  for (let attempt = 0; attempt < 250; ++attempt) {
    last = await gauges();
    if (last.running === 0 && last.waiting === 0 && last.connections === 1) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  if (!(last.running === 0 && last.waiting === 0 && last.connections === 1))
    failures.push(`after the run: ${JSON.stringify(last)} (want 0 running, 0 waiting, 1 connection: this one)`);
} catch (error) {
  failures.push(error.message);
} finally {
  stopping = true;
  if (!serverExit) await server.stop().catch((e) => failures.push(`stop: ${e.message}`));
  rmSync(work, { recursive: true, force: true });
}
const summary = [...statuses.entries()].sort((a, b) => a[0] - b[0]).map(([s, n]) => `${s}:${n}`).join(' ');
console.log(`fuzz: ${numRequests} requests, seed ${seed}, ${Date.now() - started} ms; statuses ${summary}`);
for (const f of failures.slice(0, 20)) console.log(`FAIL ${f}`);
if (failures.length) console.log(`${failures.length} failures`);
process.exit(failures.length ? 1 : 0);
