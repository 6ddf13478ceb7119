// The MCP SDK's own Client driving sandboxd's MCP server, over Streamable
// HTTP (POST /mcp) and over stdio (spawning `sandboxctl mcp`): every tool,
// the error cases, progress, and cancelled calls. Run by test_mcp.py with:
//   SBX_NODE_MODULES  the npm clients' node_modules (the SDK)
//   SBX_URL           http://127.0.0.1:PORT of the daemon
//   SBX_TOKEN         an operator token; SBX_TENANT_TOKEN: a token of tenant acme
//   SBX_SANDBOXCTL    the sandboxctl binary
// Prints "ok <case>" per case, then "SUMMARY <json>" (the tool calls made, by
// tool and result, for the metrics check); exits non-zero on the first failure.
import assert from 'node:assert/strict';
import path from 'node:path';

const nm = process.env.SBX_NODE_MODULES;
const sdk = (p) => import(path.join(nm, '@modelcontextprotocol/sdk/dist/esm', p));
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { StdioClientTransport } = await sdk('client/stdio.js');

const url = process.env.SBX_URL;
const token = process.env.SBX_TOKEN;
const calls = {}; // "tool result" -> count, as the daemon should count them
let tasks = 0; // tasks the calls made (a result with a taskId, or a cancelled call)
let cancels = 0;

const TOOLS = ['exec', 'list_files', 'list_skills', 'read_file', 'run_code', 'run_skill',
  'set_network', 'start_session', 'stop_session', 'write_file'];

function tally(name, result) {
  const key = `${name} ${result}`;
  calls[key] = (calls[key] || 0) + 1;
}

async function call(client, name, args, opts) {
  const r = await client.callTool({ name, arguments: args }, undefined, opts);
  tally(name, r.isError ? 'error' : 'ok');
  if (r.structuredContent?.taskId) tasks++;
  return r;
}

const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

async function rest(method, p, tok = token) {
  // our answers on the original's routes (docs/compatibility.md)
  const res = await fetch(url + p, {
    method, headers: { Authorization: 'Bearer ' + tok, 'X-Sandbox-Extended': '1' } });
  return { status: res.status, body: await res.json() };
}

// The task whose command holds marker, once canceled (the daemon's record).
async function waitCanceled(marker) {
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    const { body } = await rest('GET', '/runtime/tasks?limit=50');
    const t = body.tasks.find((x) => x.command.join(' ').includes(marker));
    if (t && t.status === 'canceled') return t;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`no canceled task with ${marker}`);
}

async function connect(kind, tok = token, headers = {}) {
  const client = new Client({ name: 'sbx-test', version: '1.0.0' });
  let transport;
  if (kind === 'http') {
    transport = new StreamableHTTPClientTransport(new URL(url + '/mcp'), {
      requestInit: { headers: { Authorization: 'Bearer ' + tok, ...headers } },
    });
  } else {
    transport = new StdioClientTransport({
      command: process.env.SBX_SANDBOXCTL,
      args: ['--url', url, 'mcp'],
      env: { SANDBOX_TOKEN: tok, PATH: process.env.PATH },
      stderr: 'inherit',
    });
  }
  await client.connect(transport);
  return client;
}

async function exercise(kind) {
  const ok = (what) => console.log(`ok ${kind}: ${what}`);
  const client = await connect(kind);
  assert.equal(client.getServerVersion().name, 'sandboxd');
  assert.ok(client.getServerCapabilities().tools);
  ok('initialize');

  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
  for (const t of tools) {
    assert.ok(t.description.length > 40, `${t.name}: a readable description`);
    assert.equal(t.inputSchema.type, 'object', `${t.name}: an object schema`);
    assert.equal(typeof t.annotations.readOnlyHint, 'boolean');
  }
  assert.deepEqual(tools.find((t) => t.name === 'run_code').inputSchema.required,
    ['language', 'code']);
  assert.equal(tools.find((t) => t.name === 'read_file').annotations.readOnlyHint, true);
  ok('listTools');

  // Files.
  const content = `hello over ${kind}\nline two\n`;
  let r = await call(client, 'write_file', { path: `mcp-${kind}/hello.txt`, content });
  assert.ok(!r.isError, text(r));
  r = await call(client, 'read_file', { path: `/mcp-${kind}/hello.txt` });
  assert.ok(!r.isError, text(r));
  assert.equal(text(r), content);
  r = await call(client, 'list_files', { path: `mcp-${kind}` });
  assert.ok(!r.isError && /file\s+\d+\s+hello\.txt/.test(text(r)), text(r));
  ok('write_file, read_file, list_files');

  // Commands: a shell line (its failure is a tool error the model reads), argv.
  r = await call(client, 'exec', {
    command: `cat /workspace/mcp-${kind}/hello.txt; echo oops >&2; exit 3`,
  });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.exitCode, 3);
  assert.equal(r.structuredContent.stdout, content);
  assert.equal(r.structuredContent.stderr, 'oops\n');
  assert.match(text(r), /exit code 3, status failed/);
  r = await call(client, 'exec', { argv: ['printf', '%s|', 'a b', 'c'] });
  assert.ok(!r.isError, text(r));
  assert.equal(r.structuredContent.stdout, 'a b|c|');
  assert.equal(r.structuredContent.exitCode, 0);
  ok('exec (command and argv)');

  // Skills: the catalog (the builtin ur-api, test_mcp.py's shared greeter), a run, refusals.
  r = await call(client, 'list_skills', {});
  assert.ok(!r.isError, text(r));
  const names = r.structuredContent.skills.map((s) => s.name);
  assert.ok(names.includes('ur-api') && names.includes('greeter'), text(r));
  assert.match(text(r), /- greeter \(shared[^)]*\) actions: greet: greets whoever is named\n/);
  assert.deepEqual(tools.find((t) => t.name === 'run_skill').inputSchema.required,
    ['skill', 'action']);
  r = await call(client, 'run_skill', { skill: 'greeter', action: 'greet', args: [kind, 'a b'] });
  assert.ok(!r.isError, text(r));
  assert.equal(r.structuredContent.stdout, `${kind}|a b|\n`);
  assert.equal(r.structuredContent.exitCode, 0);
  r = await call(client, 'run_skill', { skill: 'nosuch', action: 'x' });
  assert.equal(r.isError, true);
  assert.match(text(r), /unsupported skill: nosuch/);
  r = await call(client, 'run_skill', { skill: 'greeter', action: 'nope' });
  assert.equal(r.isError, true);
  assert.match(text(r), /unsupported skill action: greeter\/nope/);
  ok('list_skills, run_skill');

  // Output cut for the model, and said so.
  r = await call(client, 'exec', { command: "head -c 200000 /dev/zero | tr '\\0' a" });
  assert.ok(!r.isError, text(r));
  assert.equal(r.structuredContent.stdoutTruncated, true);
  assert.match(text(r), /stdout shown up to 65536 of 200000 bytes/);
  ok('long output cut and said');

  // Code, with its output streamed as progress notifications.
  const progress = [];
  r = await call(client, 'run_code', {
    language: 'python',
    code: 'import time\nfor i in range(3):\n    print("line", i, flush=True)\n    time.sleep(0.4)\n',
  }, { onprogress: (p) => progress.push(p), timeout: 60000 });
  assert.ok(!r.isError, text(r));
  assert.equal(r.structuredContent.stdout, 'line 0\nline 1\nline 2\n');
  assert.ok(progress.length >= 2, `progress notifications: ${JSON.stringify(progress)}`);
  assert.equal(progress.map((p) => p.message).join(''), 'line 0\nline 1\nline 2\n');
  for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress);
  ok('run_code with progress');

  // A session keeps its sandbox between calls.
  const name = `mcp-${kind}-session`;
  r = await call(client, 'start_session', { session: name });
  assert.ok(!r.isError, text(r));
  assert.equal(r.structuredContent.sessionId, name);
  r = await call(client, 'exec', { command: 'echo kept > /tmp/marker', session: name });
  assert.ok(!r.isError, text(r));
  r = await call(client, 'exec', { command: 'cat /tmp/marker', session: name });
  assert.equal(r.structuredContent.stdout, 'kept\n', text(r));
  r = await call(client, 'set_network', { session: name, deny: ['example.com'] });
  assert.equal(typeof text(r), 'string');
  r = await call(client, 'stop_session', { session: name });
  assert.ok(!r.isError, text(r));
  r = await call(client, 'stop_session', { session: name });
  assert.equal(r.isError, true);
  assert.match(text(r), /no live session/);
  ok('start_session, exec in it, set_network, stop_session');

  // Errors are tool results the model can read; an unknown tool is a protocol error.
  r = await call(client, 'read_file', { path: 'no/such/file' });
  assert.equal(r.isError, true);
  assert.match(text(r), /no\/such\/file|No such/i);
  r = await call(client, 'exec', { command: 'true', argv: ['true'] });
  assert.equal(r.isError, true);
  assert.match(text(r), /either command .* or argv/);
  r = await call(client, 'run_code', { language: 'cobol-77', code: 'x' });
  assert.equal(r.isError, true);
  assert.match(text(r), /unknown language or environment 'cobol-77'/);
  r = await call(client, 'read_file', { path: '../etc/passwd' });
  assert.equal(r.isError, true);
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }),
    (e) => e.code === -32602 && /unknown tool/.test(e.message));
  ok('errors');

  // A cancelled call cancels its task, with and without a progress stream.
  for (const withProgress of kind === 'http' ? [false, true] : [false]) {
    const marker = `cancel-${kind}-${withProgress ? 'sse' : 'json'}`;
    const ac = new AbortController();
    const p = client.callTool({ name: 'exec', arguments: { command: `sleep 60 # ${marker}` } },
      undefined, { signal: ac.signal, ...(withProgress ? { onprogress: () => {} } : {}) });
    const deadline = Date.now() + 20000;
    for (;;) { // until the task runs
      const { body } = await rest('GET', '/runtime/tasks?limit=50&status=running');
      if (body.tasks.some((x) => x.command.join(' ').includes(marker))) break;
      assert.ok(Date.now() < deadline, 'the task to cancel never ran');
      await new Promise((res) => setTimeout(res, 100));
    }
    ac.abort('the test cancels it');
    await assert.rejects(p);
    const t = await waitCanceled(marker);
    assert.equal(t.status, 'canceled');
    tally('exec', 'error'); // its result (canceled) still answers the POST
    tasks++;
    cancels++;
  }
  ok('cancelled call');
  await client.close();
}

async function tenant() {
  const ok = (what) => console.log(`ok tenant: ${what}`);
  const tt = process.env.SBX_TENANT_TOKEN;
  const client = await connect('http', tt, { 'X-Tenant-Code': 'acme' });
  let r = await call(client, 'exec', { command: 'echo acme' });
  assert.ok(!r.isError, text(r));
  const task = await rest('GET', `/runtime/tasks/${r.structuredContent.taskId}`, tt);
  assert.equal(task.body.tenantCode, 'acme');
  r = await call(client, 'set_network', { session: 'whatever', default: 'allow' });
  assert.equal(r.isError, true);
  assert.match(text(r), /needs an operator token/);
  r = await call(client, 'set_network', { session: 'whatever', allow: ['example.com'] });
  assert.equal(r.isError, true);
  assert.match(text(r), /needs an operator token/);
  await client.close();
  // Another tenant's clone is refused, as on every route.
  const other = await connect('http', tt, { 'X-Tenant-Code': 'globex' });
  r = await call(other, 'list_files', {});
  assert.equal(r.isError, true);
  assert.match(text(r), /may not act for tenant 'globex'/);
  await other.close();
  ok('a tenant token acts for its tenant and only narrows');
}

await exercise('http');
await exercise('stdio');
await tenant();
console.log('SUMMARY ' + JSON.stringify({ calls, tasks, cancels }));
