// OpenSandbox's own TypeScript SDK (@alibaba-group/opensandbox, unchanged)
// against a real sandboxd: run by test_opensandbox_sdk.py with DOMAIN and
// KEY set. Prints one "ok <name>" line per check that passed and, at the end,
// "RESULT <json>" with the figures; the first failure throws (exit 1).
import fs from "node:fs";
import { ConnectionConfig, Sandbox, SandboxManager } from "@alibaba-group/opensandbox";

const cfg = new ConnectionConfig({
  domain: process.env.DOMAIN,
  apiKey: process.env.KEY,
  requestTimeoutSeconds: 30,
});
const result = {};

function check(cond, what, detail) {
  if (!cond) throw new Error(`FAILED: ${what}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`);
  console.log(`ok ${what}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function rejects(p, what, pattern) {
  try {
    await p;
  } catch (e) {
    check(!pattern || pattern.test(String(e.message ?? e)), what, String(e.message ?? e));
    return e;
  }
  check(false, what + " (it did not fail)");
}

// ---- create, first output ----
const t0 = performance.now();
const sbx = await Sandbox.create({
  image: "python3", // an alias of the python environment
  connectionConfig: cfg,
  resource: { cpu: "1", memory: "256Mi" },
  env: { GREETING: "hello from env" },
  metadata: { team: "red", purpose: "sdk-test" },
  timeoutSeconds: 600,
  networkPolicy: { defaultAction: "deny", egress: [{ action: "allow", target: "svc.test" }] },
});
let firstAt = 0;
const first = await sbx.commands.run("echo first", {}, {
  onStdout: () => { if (!firstAt) firstAt = performance.now(); },
});
result.createToFirstOutputMs = Math.round(firstAt - t0);
check(first.logs.stdout.map((m) => m.text).join("") === "first\n" && first.exitCode === 0,
  "create from an environment, then a first command", first.logs);
const info = await sbx.getInfo();
check(info.status.state === "Running" && info.metadata.team === "red" && info.image.uri === "python3",
  "getInfo: Running, with its metadata and image", info);

// ---- commands: streaming, exit codes, env, cwd, timeout ----
const seen = [];
const streamed = await sbx.commands.run("echo one; sleep 0.6; echo two >&2; echo three", {}, {
  onStdout: (m) => seen.push(["out", m.text, performance.now()]),
  onStderr: (m) => seen.push(["err", m.text, performance.now()]),
});
const tDone = performance.now();
check(seen.length >= 3 && seen[0][1] === "one\n", "output arrives as events", seen);
check(tDone - seen[0][2] >= 400, "the first line arrived before the command ended (streamed)",
  { first: seen[0][2], done: tDone });
check(streamed.logs.stderr.map((m) => m.text).join("") === "two\n" && streamed.exitCode === 0,
  "stderr apart, exit code 0", streamed.logs);
const failed = await sbx.commands.run("echo before; exit 7");
check(failed.exitCode === 7 && failed.error?.value === "7", "a non-zero exit is an error with its code",
  failed.error);
const env = await sbx.commands.run('echo "$GREETING/$EXTRA"; pwd', {
  envs: { EXTRA: "per-command" }, workingDirectory: "/tmp",
});
check(env.logs.stdout.map((m) => m.text).join("") === "hello from env/per-command\n/tmp\n",
  "the sandbox's env, the command's envs and its working directory", env.logs);
const slow = await sbx.commands.run("sleep 20", { timeoutSeconds: 1 });
check(slow.exitCode !== 0 && slow.exitCode !== null, "a command past its timeout is stopped", slow.error);

// ---- background commands, logs, interrupt ----
const bg = await sbx.commands.run("echo a; sleep 0.3; echo b; exit 3", { background: true });
check(typeof bg.id === "string" && bg.id.length > 0, "a background command has an id", bg);
let st;
for (let i = 0; i < 100; i++) {
  st = await sbx.commands.getCommandStatus(bg.id);
  if (!st.running) break;
  await sleep(100);
}
check(!st.running && st.exitCode === 3 && st.finishedAt instanceof Date, "its status once it ended", st);
const logs = await sbx.commands.getBackgroundCommandLogs(bg.id);
check(logs.content === "a\nb\n" && logs.cursor === 4, "its logs, with the next cursor", logs);
const tail = await sbx.commands.getBackgroundCommandLogs(bg.id, 2);
check(tail.content === "b\n", "logs from a cursor on", tail);
const forever = await sbx.commands.run("sleep 60", { background: true });
await sbx.commands.interrupt(forever.id);
for (let i = 0; i < 100; i++) {
  st = await sbx.commands.getCommandStatus(forever.id);
  if (!st.running) break;
  await sleep(50);
}
check(!st.running && st.exitCode !== 0, "interrupt stops a background command", st);

// ---- files ----
await sbx.files.createDirectories([{ path: "/workspace/proj/src", mode: 755 }]);
await sbx.files.writeFiles([
  { path: "/workspace/proj/src/a.txt", data: "hello world, hello files" },
  { path: "proj/src/b.py", data: "print('b')\n", mode: 600 },
]);
check(await sbx.files.readFile("/workspace/proj/src/a.txt") === "hello world, hello files",
  "write then read a file");
const part = await sbx.files.readFile("/workspace/proj/src/a.txt", { range: "bytes=6-10" });
check(part === "world", "read a byte range", part);
const fi = await sbx.files.getFileInfo(["/workspace/proj/src/b.py"]);
check(fi["/workspace/proj/src/b.py"].mode === 600 && fi["/workspace/proj/src/b.py"].size === 11,
  "file info with its mode and size", fi);
const listing = await sbx.files.listDirectory({ path: "/workspace/proj", depth: 2 });
check(listing.map((f) => f.path).sort().join(",") ===
  "/workspace/proj/src,/workspace/proj/src/a.txt,/workspace/proj/src/b.py", "list a directory", listing);
await sbx.files.moveFiles([{ src: "/workspace/proj/src/a.txt", dest: "/workspace/proj/moved/a.txt" }]);
const found = await sbx.files.search({ path: "/workspace", pattern: "*.txt" });
check(found.length === 1 && found[0].path === "/workspace/proj/moved/a.txt", "move, then search", found);
const rep = await sbx.files.replaceContentsDetailed([
  { path: "/workspace/proj/moved/a.txt", oldContent: "hello", newContent: "bye" },
]);
check(rep[0].replacedCount === 2, "replace contents", rep);
const cat = await sbx.commands.run("cat /workspace/proj/moved/a.txt");
check(cat.logs.stdout.map((m) => m.text).join("") === "bye world, bye files",
  "a command sees the files the API wrote", cat.logs);
await sbx.files.setPermissions([{ path: "/workspace/proj/moved/a.txt", mode: 640 }]);
const fi2 = await sbx.files.getFileInfo(["/workspace/proj/moved/a.txt"]);
check(fi2["/workspace/proj/moved/a.txt"].mode === 640, "set permissions", fi2);
await sbx.files.deleteFiles(["/workspace/proj/moved/a.txt"]);
await rejects(sbx.files.readFile("/workspace/proj/moved/a.txt"), "a deleted file is gone");
await rejects(sbx.files.readFile("/etc/passwd"), "a path outside /workspace is refused");

const quiet = await sbx.commands.run("sleep 3.5; echo awake");
check(quiet.logs.stdout.map((m) => m.text).join("") === "awake\n" && quiet.exitCode === 0,
  "a command quiet for longer than the ping interval (its stream carries pings)", quiet.logs);
// ---- metadata and list filters ----
const other = await Sandbox.create({
  image: "shell", connectionConfig: cfg, resource: { cpu: "500m", memory: "128Mi" },
  metadata: { team: "blue" }, timeoutSeconds: 600,
});
const mgr = SandboxManager.create({ connectionConfig: cfg });
let red = await mgr.listSandboxInfos({ metadata: { team: "red" } });
check(red.items.length === 1 && red.items[0].id === sbx.id, "list filtered by metadata", red.items);
await sbx.patchMetadata({ team: "green", purpose: null });
red = await mgr.listSandboxInfos({ metadata: { team: "red" } });
const green = await mgr.listSandboxInfos({ metadata: { team: "green" } });
check(red.items.length === 0 && green.items.length === 1 && !("purpose" in green.items[0].metadata),
  "PATCH metadata merges (null removes a key)", green.items);
const page = await mgr.listSandboxInfos({ states: ["Running"], pageSize: 1 });
check(page.items.length === 1 && page.pagination.totalItems === 2 && page.pagination.hasNextPage,
  "list by state, paged", page.pagination);

// ---- pause and resume: a paused sandbox's processes make no progress ----
await sbx.commands.run("i=0; while true; do i=$((i+1)); echo $i > /workspace/count; sleep 0.05; done",
  { background: true });
await sleep(400);
await sbx.pause();
check((await sbx.getInfo()).status.state === "Paused", "pause: Paused");
const c1 = await sbx.files.readFile("/workspace/count");
await sleep(700);
const c2 = await sbx.files.readFile("/workspace/count");
check(c1 === c2, "no progress while paused", [c1, c2]);
const refused = await rejects(sbx.commands.run("true"), "no command runs in a paused sandbox");
check(refused.statusCode === 409, "... refused with 409", refused.statusCode);
const resumed = await sbx.resume();
check((await resumed.getInfo()).status.state === "Running", "resume: Running");
await sleep(500);
const c3 = await resumed.files.readFile("/workspace/count");
check(Number(c3) > Number(c2), "progress again once resumed", [c2, c3]);

// ---- renew ----
const before = Date.now();
await sbx.renew(3600);
const exp = (await sbx.getInfo()).expiresAt.getTime();
check(exp >= before + 3590e3 && exp <= Date.now() + 3610e3, "renew moves expiresAt", exp - before);

// ---- network policy (svc.test answers inside, from the daemon's hosts) ----
const pol = await sbx.getEgressPolicy();
check(pol.defaultAction === "deny" && pol.egress.length === 1 && pol.egress[0].target === "svc.test",
  "the egress policy as created", pol);
const resolve = (name) =>
  `python3 -c "import socket,sys\ntry: print(socket.gethostbyname('${name}'))\nexcept OSError: print('refused')"`;
let dns = await sbx.commands.run(resolve("svc.test"));
check(dns.logs.stdout.map((m) => m.text).join("").trim() === "203.0.113.10", "an allowed name resolves",
  dns.logs);
await sbx.patchEgressRules([{ action: "deny", target: "svc.test" }]);
const pol2 = await sbx.getEgressPolicy();
check(pol2.egress.length === 1 && pol2.egress[0].action === "deny", "patch a rule by its target", pol2);
dns = await sbx.commands.run(resolve("svc.test"));
check(dns.logs.stdout.map((m) => m.text).join("").trim() === "refused",
  "the patched policy applies at once", dns.logs);

// ---- bash sessions through the SDK ----
const shellId = await sbx.commands.createSession({ workingDirectory: "/tmp" });
await sbx.commands.runInSession(shellId, "export COUNT=41; cd /workspace");
const inSession = await sbx.commands.runInSession(shellId, "echo $((COUNT + 1)) $(pwd)");
check(inSession.logs.stdout.map((m) => m.text).join("") === "42 /workspace\n" && inSession.exitCode === 0,
  "a bash session keeps its variables and cwd", inSession.logs);
const badRun = await sbx.commands.runInSession(shellId, "exit_code() { return 9; }; exit_code");
check(badRun.exitCode === 9, "a session run's exit code", badRun.error);
await sbx.commands.deleteSession(shellId);

// ---- the code interpreter, by fetch (its SDK package is not on npm) ----
const execdUrl = await sbx.getEndpointUrl(44772);
const headers = { "OPEN-SANDBOX-API-KEY": process.env.KEY, "content-type": "application/json" };
const ctx = await (await fetch(`${execdUrl}/code/context`, {
  method: "POST", headers, body: JSON.stringify({ language: "python" }),
})).json();
async function runCode(code) {
  const res = await fetch(`${execdUrl}/code`, {
    method: "POST", headers, body: JSON.stringify({ code, context: ctx }),
  });
  return (await res.text()).split("\n").filter((l) => l.startsWith("data:"))
    .map((l) => JSON.parse(l.slice(5)));
}
await runCode("import math\nvalue = math.factorial(5)");
const evs = await runCode("print('v', value)\nvalue * 2");
check(evs.some((e) => e.type === "stdout" && e.text === "v 120\n") &&
  evs.some((e) => e.type === "result" && e.results.text === "240"),
  "the interpreter keeps variables; the last value is the result", evs);

// ---- a WebSocket server inside, reached through its endpoint by Node's own WebSocket ----
await sbx.files.writeFiles([{ path: "/workspace/ws.py", data: fs.readFileSync(process.env.WS_SERVER, "utf8") }]);
await sbx.commands.run("python3 /workspace/ws.py 8765", { background: true });
const wsUrl = (await sbx.getEndpointUrl(8765)).replace(/^http/, "ws") + "/chat";
function wsTalk() {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl, { headers: { "OPEN-SANDBOX-API-KEY": process.env.KEY } });
    const got = [];
    ws.onerror = (e) => reject(new Error(String(e.message ?? e.type)));
    ws.onmessage = (m) => {
      got.push(m.data);
      if (got.length === 1) ws.send("stressed");
      else ws.close(1000, "done");
    };
    ws.onclose = (e) => resolve({ got, code: e.code });
  });
}
let talk;
for (let i = 0; i < 100 && !talk; i++) {
  try { talk = await wsTalk(); } catch { await sleep(100); }
}
check(talk && talk.got[0] === "hello from inside" && talk.got[1] === "desserts" && talk.code === 1000,
  "Node's WebSocket through the endpoint: frames both ways, a clean close", talk);

// ---- snapshots: of a live sandbox (frozen while taken), a sandbox made from one ----
await sbx.files.writeFiles([{ path: "/workspace/snap.txt", data: "before" }]);
const snap = await mgr.createSnapshot(sbx.id, { name: "sdk-snap" });
check(snap.status.state === "Creating" && snap.sandboxId === sbx.id && snap.createdAt instanceof Date,
  "createSnapshot: accepted, Creating", snap);
let snapInfo;
for (let i = 0; i < 600; i++) {
  snapInfo = await mgr.getSnapshot(snap.id);
  if (snapInfo.status.state !== "Creating") break;
  await sleep(50);
}
check(snapInfo.status.state === "Ready" && snapInfo.name === "sdk-snap" &&
  snapInfo.status.lastTransitionAt instanceof Date, "getSnapshot: Ready", snapInfo);
check((await sbx.getInfo()).status.state === "Running", "the sandbox runs on after its snapshot");
await sbx.files.writeFiles([{ path: "/workspace/snap.txt", data: "after" }]);
const snaps = await mgr.listSnapshots({ sandboxId: sbx.id, states: ["Ready"] });
check(snaps.items.length === 1 && snaps.items[0].id === snap.id && snaps.pagination.totalItems === 1,
  "listSnapshots by sandbox and state", snaps);
const fromSnap = await Sandbox.create({ snapshotId: snap.id, connectionConfig: cfg,
  timeoutSeconds: 600, resource: { cpu: "1", memory: "128Mi" } });
check(await fromSnap.files.readFile("/workspace/snap.txt") === "before" &&
  (await fromSnap.getInfo()).snapshotId === snap.id,
  "Sandbox.create({snapshotId}): the workspace as it was", await fromSnap.getInfo());
check(await sbx.files.readFile("/workspace/snap.txt") === "after", "the source keeps its own");
await fromSnap.kill();
await fromSnap.close();
await mgr.deleteSnapshot(snap.id);
await rejects(mgr.getSnapshot(snap.id), "deleteSnapshot: gone", /no snapshot/);

// ---- errors, expiry, kill ----
await rejects(Sandbox.create({ image: "ubuntu:22.04", connectionConfig: cfg, timeoutSeconds: 60 }),
  "an unknown image names our environments", /python, node, shell/);
const brief = await Sandbox.create({ image: "shell", connectionConfig: cfg, timeoutSeconds: 1,
  resource: { cpu: "1", memory: "128Mi" } });
let state;
for (let i = 0; i < 60; i++) {
  state = (await brief.getInfo()).status.state;
  if (state === "Terminated") break;
  await sleep(100);
}
check(state === "Terminated", "a sandbox ends when its timeout expires", state);
await brief.kill();
await other.kill();
await sbx.kill();
await rejects(sbx.getInfo(), "a killed sandbox is gone", /no sandbox/);
for (const s of [sbx, other, brief, resumed]) await s.close();
await mgr.close();
console.log("RESULT " + JSON.stringify(result));
