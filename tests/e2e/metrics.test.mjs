// /metrics beyond vLLM's names: prefill chunk sizes add up to the prompt
// tokens the engine computed, and the cache-tier block gauges partition the
// device tier's capacity.
import assert from 'node:assert/strict';
import { client, eventually, metrics, metric } from './helpers.mjs';

export const tests = {
  async 'prefill chunks add up to the computed prompt and tier blocks partition the pool'(ctx) {
    const before = await metrics(ctx);
    // Token ids no other test sends: nothing of it is in the prefix cache.
    const prompt = Array.from({ length: 300 }, (_, i) => 7 + ((i * 37 + 11) % 200));
    const r = await client(ctx).completions.create({ model: ctx.model, prompt, max_tokens: 2, ignore_eos: true });
    assert.equal(r.usage.prompt_tokens, 300);
    // The engine files a request's timeline just after its last output, so
    // the response can arrive first: poll (bounded) until it is counted.
    let after;
    await eventually(async () => {
      after = await metrics(ctx);
      return metric(after, 'sluice:prefill_chunk_tokens_sum') > metric(before, 'sluice:prefill_chunk_tokens_sum');
    }, 'the request\'s prefill chunks in /metrics');
    const chunkTokens = metric(after, 'sluice:prefill_chunk_tokens_sum') - metric(before, 'sluice:prefill_chunk_tokens_sum');
    const computed = metric(after, 'sluice:prefill_tokens_computed_total') -
      metric(before, 'sluice:prefill_tokens_computed_total');
    assert.equal(chunkTokens, computed);
    assert.equal(computed, 300 - r.usage.prompt_tokens_details.cached_tokens);
    assert.ok(metric(after, 'sluice:prefill_chunk_tokens_count') > metric(before, 'sluice:prefill_chunk_tokens_count'));
    const tier = (state) => metric(after, 'sluice:kv_cache_tier_blocks', `,tier="device",state="${state}"`);
    assert.equal(tier('used') + tier('cached') + tier('free'),
      metric(after, 'sluice:kv_cache_tier_capacity_blocks', ',tier="device"'));
    assert.ok(metric(after, 'sluice:time_to_first_token_server_overhead_seconds_count') > 0);
  },
};
