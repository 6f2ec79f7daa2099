// SIGTERM while a stream is in flight: /health turns 503, the stream still
// ends properly (finished, or an in-band error) with data: [DONE], and the
// server exits 0 within the shutdown timeout plus a margin.
import assert from 'node:assert/strict';
import { sseData } from './helpers.mjs';

export async function sigtermWithStreamInFlight(ctx, exited) {
  const response = await fetch(`${ctx.baseURL}/v1/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ctx.apiKey}` },
    body: JSON.stringify({ model: ctx.model, prompt: 'drain me', max_tokens: 4000, ignore_eos: true, stream: true }) });
  assert.equal(response.status, 200);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = decoder.decode((await reader.read()).value);
  ctx.server.kill('SIGTERM');
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value);
  }
  const events = sseData(text);
  assert.equal(events.at(-1), '[DONE]');
  const before = events.at(-2);
  assert.ok(before.error || before.choices?.[0]?.finish_reason, JSON.stringify(before));
  const started = Date.now();
  const { code, signal } = await Promise.race([exited,
    new Promise((res) => setTimeout(() => res({ code: 'timeout' }), 15000))]);
  assert.equal(code, 0, `exit code ${code} signal ${signal}`);
  assert.ok(Date.now() - started < 15000);
}
