// `sluice serve --async-scheduling` on the CPU backend: the engine plans each
// step while the backend (on the pipeline's worker thread) runs the one
// before. Concurrent streams must equal `sluice generate` (no engine, no
// server) token for token, and a stop token and JSON mode must give exactly the
// shared (inline) server's answers, though the engine learns of a stop a step
// late and the worker, not the engine thread, drives the JSON constraint.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import { assertJsonPrefixes, client, eventually, spawnServer } from './helpers.mjs';

function generate(ctx, ids, maxTokens) {
  const out = execFileSync(ctx.sluice, ['generate', '--model', ctx.modelDir, '--prompt-ids', ids.join(','),
    '--max-tokens', String(maxTokens), '--ignore-eos', '--threads', '1']).toString().trim();
  return out.split(',').map(Number);
}

async function streamedIds(openai, prompt, extra) {
  const stream = await openai.completions.create({ model: 'async', prompt, temperature: 0, ignore_eos: true,
    logprobs: 1, stream: true, ...extra });
  const tokens = [];
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    for (const t of choice.logprobs?.tokens ?? []) tokens.push(t);
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  return { tokens, finish };
}

export const tests = {
  async 'async scheduling serves concurrent streams exactly and stops on time'(ctx) {
    // The shared server's KV size: the 1 GiB default took ~10 s to become healthy on a
    // loaded 2-core machine, near spawnServer's bound.
    const server = await spawnServer(ctx, ['--model', ctx.modelDir, '--served-model-name', 'async',
      '--async-scheduling', '--threads', '1', '--kv-cache-memory', String(64 << 20)]);
    try {
      const openai = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'none', maxRetries: 0 });
      const detokenize = async (ids) => (await fetch(`${server.baseURL}/detokenize`, { method: 'POST',
        body: JSON.stringify({ tokens: ids }) }).then((r) => r.json())).prompt;
      const prompts = [[5, 17, 300, 42, 7], [9, 8, 7], [100, 200, 300, 400, 500, 600, 700, 800, 900], [1, 2]];
      const expected = prompts.map((ids) => generate(ctx, ids, 16));
      const results = await Promise.all(prompts.map((ids) => openai.completions.create({ model: 'async',
        prompt: ids, max_tokens: 16, temperature: 0, ignore_eos: true, skip_special_tokens: false })));
      for (let i = 0; i < prompts.length; ++i) {
        assert.equal(results[i].choices[0].text, await detokenize(expected[i]), `prompt ${i}`);
        assert.equal(results[i].choices[0].finish_reason, 'length');
        assert.equal(results[i].usage.completion_tokens, 16);
      }

      // Stop on the 4th generated token: the answer ends there, as on the inline server.
      const ids = prompts[0];
      const stopId = expected[0][3];
      const firstAt = expected[0].indexOf(stopId);
      const params = { prompt: ids, max_tokens: 16, temperature: 0, ignore_eos: true, stop_token_ids: [stopId] };
      const stopped = await openai.completions.create({ model: 'async', ...params });
      const inline = await client(ctx).completions.create({ model: ctx.model, ...params });
      assert.equal(stopped.choices[0].finish_reason, 'stop');
      assert.equal(stopped.usage.completion_tokens, firstAt + 1);
      assert.equal(stopped.choices[0].text, inline.choices[0].text);
      assert.equal(stopped.usage.completion_tokens, inline.usage.completion_tokens);
      const streamed = await streamedIds(openai, ids, { max_tokens: 16, stop_token_ids: [stopId] });
      assert.equal(streamed.finish, 'stop');
      assert.equal(streamed.tokens.length, firstAt + 1);
      // Each stop cost one decode planned before it was seen, and /metrics says so once the
      // engine has collected that decode (after the answer ended).
      const dropped = async () => {
        const text = await fetch(`${server.baseURL}/metrics`).then((r) => r.text());
        const m = text.match(/^sluice:async_dropped_sequence_steps_total\{model_name="async"\} (\d+)/m);
        assert.ok(m, 'sluice:async_dropped_sequence_steps_total missing');
        return Number(m[1]);
      };
      await eventually(async () => (await dropped()) >= 2, 'two dropped sequence-steps');
      assert.equal(await dropped(), 2);

      // JSON mode: the worker fills each mask after feeding the constraint the token before it;
      // the answer is the inline server's, token for token.
      const json = { prompt: [3, 4, 5], max_tokens: 24, temperature: 0, response_format: { type: 'json_object' } };
      const asyncJson = await openai.completions.create({ model: 'async', ...json });
      const inlineJson = await client(ctx).completions.create({ model: ctx.model, ...json });
      assert.equal(asyncJson.choices[0].text, inlineJson.choices[0].text);
      assert.equal(asyncJson.choices[0].finish_reason, inlineJson.choices[0].finish_reason);
      assert.equal(asyncJson.choices[0].text.trimStart()[0], '{', asyncJson.choices[0].text);
      assertJsonPrefixes([asyncJson.choices[0]]);
    } finally {
      await server.stop();
    }
  },
};
