// Run by tests/interop/test_sse_clients.py under Node: the TypeScript SDK's
// SSEClientTransport (the older HTTP+SSE transport) against the gateway's
// `.../sse` endpoint. Usage: node sse_client_ts.cjs SDK_DIR URL
// (SDK_DIR: an installed @modelcontextprotocol/sdk). Lists the tools, calls
// one, calls an unknown one, answers a sampling request, and prints one JSON
// line with what it saw. Exits non-zero on anything unexpected.
'use strict';

const path = require('path');

const [sdkDir, url] = process.argv.slice(2);
const { Client } = require(path.join(sdkDir, 'dist/cjs/client/index.js'));
const { SSEClientTransport } = require(path.join(sdkDir, 'dist/cjs/client/sse.js'));
const { CreateMessageRequestSchema } = require(path.join(sdkDir, 'dist/cjs/types.js'));

const MAX_PAGES = 50;

async function main() {
  const seen = { sampling: [], errors: [] };
  const sampled = `sampled-by-ts-${Math.random().toString(16).slice(2, 10)}`;
  const client = new Client({ name: 'junction-interop-ts', version: '0.0.1' }, { capabilities: { sampling: {} } });
  client.onerror = (error) => seen.errors.push(String(error).slice(0, 300));
  client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
    const content = request.params.messages[0].content;
    seen.sampling.push(content.type === 'text' ? content.text : JSON.stringify(content));
    return { role: 'assistant', content: { type: 'text', text: sampled }, model: 'junction-ts' };
  });
  const transport = new SSEClientTransport(new URL(url));
  await client.connect(transport);
  seen.server = client.getServerVersion()?.name ?? null;

  const names = [];
  let cursor;
  for (let page = 0; page < MAX_PAGES; page++) {
    const listed = await client.listTools(cursor ? { cursor } : {});
    names.push(...listed.tools.map((t) => t.name));
    cursor = listed.nextCursor;
    if (!cursor) break;
  }
  seen.tools = names.sort();

  const added = await client.callTool({ name: 'demo__add', arguments: { a: 40, b: 2 } });
  seen.add = { isError: added.isError ?? false, text: added.content.filter((c) => c.type === 'text').map((c) => c.text) };

  try {
    const unknown = await client.callTool({ name: 'demo__no_such_tool', arguments: {} });
    seen.unknown = { result: unknown };
  } catch (error) {
    seen.unknown = { code: error.code ?? null, message: String(error.message) };
  }

  const asked = await client.callTool({ name: 'private__ask_model', arguments: { prompt: 'what is ts?' } });
  seen.ask = {
    isError: asked.isError ?? false,
    text: asked.content.filter((c) => c.type === 'text').map((c) => c.text),
    sampled,
  };

  await client.close();
  process.stdout.write(JSON.stringify(seen) + '\n');
}

const timer = setTimeout(() => {
  process.stderr.write('timed out after 60s\n');
  process.exit(3);
}, 60000);

main().then(
  () => {
    clearTimeout(timer);
    process.exit(0);
  },
  (error) => {
    process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
    process.exit(1);
  },
);
