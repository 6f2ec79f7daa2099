// Tools through the real server: a copy of the tiny model whose chat template
// renders the tool list (Hermes style, as Qwen's templates do), served with
// each tool-call parser sluice has under vLLM's names for the Qwen and Llama
// families (hermes, qwen3_coder, llama3_json). The random-weight model will not call a tool,
// so this checks what a real server must do with any model: tools and
// tool_choice are accepted, they reach the prompt (prompt_tokens grows by the
// rendered definitions), and the answer is well formed. Tool calls actually
// emitted end to end, in each of those syntaxes, are
// tests/server/tool_call_stream_test.cpp (a scripted backend behind the real
// HTTP server).
import assert from 'node:assert/strict';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { spawnServer } from './helpers.mjs';

const TEMPLATE = "{{- bos_token }}{%- if tools %}{{- '<|start_header_id|>system<|end_header_id|>\\n\\n# Tools\\n<tools>' }}" +
  "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}{{- '\\n</tools><|eot_id|>' }}{%- endif %}" +
  "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + " +
  "message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}" +
  "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

// One server with `parser`: tools reach the prompt and every answer is well formed.
async function checkToolsServed(ctx, dir, parser) {
  const server = await spawnServer(ctx, ['--model', dir, '--served-model-name', 'tools', '--tool-call-parser',
    parser, '--enable-auto-tool-choice', '--threads', '1', '--kv-cache-memory', String(16 << 20)]);
  try {
    const openai = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'none', maxRetries: 0 });
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const plain = await openai.chat.completions.create({ model: 'tools', messages, max_tokens: 4 });
    for (const toolChoice of ['auto', 'required', { type: 'function', function: { name: 'get_weather' } }]) {
      const r = await openai.chat.completions.create({ model: 'tools', messages, max_tokens: 4, tools: [weatherTool],
        tool_choice: toolChoice });
      const definition = JSON.stringify(weatherTool).length;
      assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + definition / 8,
        `tool definitions not in the prompt: ${r.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
      assert.equal(r.choices.length, 1);
      assert.equal(r.choices[0].message.role, 'assistant');
      assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
      assert.equal(Number.isInteger(r.created), true);
      if (r.choices[0].finish_reason !== 'tool_calls') assert.equal(typeof r.choices[0].message.content, 'string');
    }
    // tool_choice "none" keeps the definitions out of the prompt.
    const none = await openai.chat.completions.create({ model: 'tools', messages, max_tokens: 4, tools: [weatherTool],
      tool_choice: 'none' });
    assert.equal(none.usage.prompt_tokens, plain.usage.prompt_tokens);
    // Streaming with tools: chunks in OpenAI's shape, usage last.
    const stream = await openai.chat.completions.create({ model: 'tools', messages, max_tokens: 4,
      tools: [weatherTool], stream: true, stream_options: { include_usage: true } });
    let usage;
    let finish;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
    }
    assert.ok(['stop', 'length', 'tool_calls'].includes(finish));
    assert.ok(usage.prompt_tokens > plain.usage.prompt_tokens);
  } finally {
    await server.stop();
  }
}

export const tests = {
  async 'tools and tool_choice reach the prompt; the answer is well formed, with each parser'(ctx) {
    const dir = join(ctx.modelDir, '..', 'model-tools');
    cpSync(ctx.modelDir, dir, { recursive: true });
    const configPath = join(dir, 'tokenizer_config.json');
    const config = JSON.parse(readFileSync(configPath, 'utf8'));
    config.chat_template = TEMPLATE;
    writeFileSync(configPath, JSON.stringify(config));
    for (const parser of ['hermes', 'qwen3_coder', 'llama3_json']) await checkToolsServed(ctx, dir, parser);
  },

  async 'tool_choice auto is refused without --enable-auto-tool-choice, with vLLM\'s message'(ctx) {
    // The shared server runs without the flag. Tools without tool_choice mean auto, as in vLLM.
    const messages = [{ role: 'user', content: 'weather?' }];
    const openai = new OpenAI({ baseURL: `${ctx.baseURL}/v1`, apiKey: ctx.apiKey, maxRetries: 0 });
    for (const extra of [{ tool_choice: 'auto' }, {}]) {
      await assert.rejects(openai.chat.completions.create({ model: ctx.model, messages, max_tokens: 2,
        tools: [weatherTool], ...extra }), (e) => {
        assert.equal(e.status, 400);
        assert.equal(e.param, 'tool_choice');
        assert.equal(e.error.message, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set');
        return true;
      });
    }
    // "none" and "required" do not need it, as in vLLM.
    for (const toolChoice of ['none', 'required']) {
      const r = await openai.chat.completions.create({ model: ctx.model, messages, max_tokens: 2, tools: [weatherTool],
        tool_choice: toolChoice });
      assert.equal(r.choices.length, 1);
    }
  },
};
