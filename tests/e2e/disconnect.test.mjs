// Clients that go away: their requests are aborted (streaming and not), their
// KV blocks come back, and the others are still served correctly.
import assert from 'node:assert/strict';
import http from 'node:http';
import { client, metrics, metric, eventually } from './helpers.mjs';

const longRequest = (ctx) => ({ model: ctx.model, prompt: 'A long story:', max_tokens: 4000, ignore_eos: true });

async function idle(ctx) {
  await eventually(async () => {
    const m = await metrics(ctx);
    return metric(m, 'vllm:num_requests_running') === 0 && metric(m, 'vllm:num_requests_waiting') === 0 &&
      metric(m, 'vllm:kv_cache_usage_perc') === 0;
  }, 'the engine to be idle with no KV blocks in use');
}

export const tests = {
  async 'disconnect mid-stream aborts and frees KV'(ctx) {
    await idle(ctx);
    const before = await metrics(ctx);
    const abortsBefore = metric(before, 'vllm:request_success_total', ',finished_reason="abort"');
    const stream = await client(ctx).completions.create({ ...longRequest(ctx), stream: true });
    let chunks = 0;
    // Leaving the loop early makes the client abort the HTTP request.
    for await (const _ of stream) {
      if (++chunks === 3) break;
    }
    assert.equal(chunks, 3);
    await idle(ctx);
    const after = await metrics(ctx);
    assert.equal(metric(after, 'vllm:request_success_total', ',finished_reason="abort"'), abortsBefore + 1);
    assert.ok(metric(after, 'vllm:generation_tokens_total') - metric(before, 'vllm:generation_tokens_total') < 4000);
  },

  async 'disconnect of a non-streaming request aborts it'(ctx) {
    await idle(ctx);
    const abortsBefore = metric(await metrics(ctx), 'vllm:request_success_total', ',finished_reason="abort"');
    const body = JSON.stringify(longRequest(ctx));
    const url = new URL(`${ctx.baseURL}/v1/completions`);
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${ctx.apiKey}`,
        'content-length': Buffer.byteLength(body) } });
    req.on('error', () => {});
    req.end(body);
    // Wait until the engine runs it, then hang up.
    await eventually(async () => metric(await metrics(ctx), 'vllm:num_requests_running') === 1, 'the request to run');
    req.destroy();
    await idle(ctx);
    const aborts = metric(await metrics(ctx), 'vllm:request_success_total', ',finished_reason="abort"');
    assert.equal(aborts, abortsBefore + 1);
  },

  async '100 concurrent streams, half disconnect, the rest finish correctly and KV returns to 0'(ctx) {
    const num = 100;
    const tasks = [];
    for (let i = 0; i < num; ++i) {
      const leave = i % 2 === 0;
      tasks.push((async () => {
        const stream = await client(ctx).chat.completions.create({ model: ctx.model,
          messages: [{ role: 'user', content: `request ${i}` }], max_tokens: leave ? 3000 : 8, ignore_eos: true,
          stream: true, stream_options: { include_usage: true } });
        let usage;
        let n = 0;
        for await (const c of stream) {
          if (c.usage) usage = c.usage;
          if (leave && ++n === 2) return 'left';  // leaving the loop aborts the request
        }
        assert.ok(!leave, 'a leaving client should not reach the end');
        assert.equal(usage.completion_tokens, 8);
        return 'done';
      })());
    }
    const results = await Promise.all(tasks);
    assert.equal(results.filter((r) => r === 'done').length, num / 2);
    await idle(ctx);
    const m = await metrics(ctx);
    assert.equal(metric(m, 'sluice:kv_cache_tier_blocks', ',tier="device",state="used"'), 0);
    // The server still answers correctly afterwards.
    const after = await client(ctx).completions.create({ model: ctx.model, prompt: 'still here?', max_tokens: 5,
      ignore_eos: true });
    assert.equal(after.usage.completion_tokens, 5);
    assert.equal(after.choices[0].finish_reason, 'length');
  },
};
