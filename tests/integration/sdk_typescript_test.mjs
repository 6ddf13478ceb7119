// The TypeScript SDK (its compiled ESM package) against a real daemon, run by
// test_sdk_typescript.py with Node: SBX_URL (the daemon), SBX_RELAY (a relay
// to it that drops event streams mid-frame), SBX_TOKEN, SBX_ACME_TOKEN,
// SBX_TMP, SBX_SKILL (the shared skill the daemon's config holds). Prints "ok NAME" / "FAIL NAME" lines; exits 1 on a failure.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import {
  BadRequestError, ConflictError, ConnectionError, ForbiddenError, NotFoundError, Sandbox,
  SandboxError, TaskTimeoutError, TooLargeError, UnauthorizedError, EXTENDED_HEADER, toolCall, turnResult,
} from "@sandbox/sdk";

const E = process.env;
const sbx = new Sandbox({ baseUrl: E.SBX_URL, token: E.SBX_TOKEN });
const acme = new Sandbox({ baseUrl: E.SBX_URL, token: E.SBX_ACME_TOKEN, tenant: "acme", cloneId: "ts" });
let failed = 0;
let passed = 0;

function check(cond, what, v) {
  if (!cond) {
    let s = "";
    try {
      s = v === undefined ? "" : "\n  " + JSON.stringify(v).slice(0, 3000);
    } catch {
      s = "\n  " + String(v);
    }
    throw new Error(what + s);
  }
}

async function rejects(Cls, fn) {
  try {
    await fn();
  } catch (e) {
    if (e instanceof Cls) return e;
    throw new Error(`expected ${Cls.name}, got ${e?.name}: ${e?.message}`);
  }
  throw new Error(`expected ${Cls.name}, nothing thrown`);
}

async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(2)}s)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name} (${((Date.now() - t0) / 1000).toFixed(2)}s)\n${e?.stack ?? e}`);
  }
}

await test("exec_argv_shell_stdin_env", async () => {
  let r = await sbx.exec(["python3", "-c", "print(6*7)"]);
  check(r.exitCode === 0 && r.stdout === "42\n", "argv", r);
  check(r.taskId && r.status === "succeeded" && r.report?.outcome === "exited", "extended keys", r);
  const t = await sbx.tasks.get(r.taskId);
  check(t.id === r.taskId && t.result?.stdout === "42\n", "exec made a task", t);
  r = await sbx.exec("echo $GREETING; cat; exit 3", { env: { GREETING: "hi" }, stdin: "in\n" });
  check(r.exitCode === 3 && r.stdout === "hi\nin\n", "shell string, env, stdin", r);
  r = await acme.exec(["/bin/sh", "-c", "pwd"]);
  check(r.exitCode === 0 && r.stdout === "/workspace\n", "a tenant token for its clone", r);
  check(EXTENDED_HEADER[0] === "X-Sandbox-Extended", "the header exported");
});

await test("run_code_languages", async () => {
  for (const [language, code] of [
    ["python", "import sys; print(6*7); print('e', file=sys.stderr)"],
    ["node", "console.log(6*7); console.error('e')"],
    ["shell", "echo $((6*7)); echo e >&2"],
  ]) {
    const r = await sbx.runCode(code, { language });
    check(r.exitCode === 0 && r.stdout === "42\n" && r.stderr === "e\n", language, r);
  }
  const r = await sbx.runCode("import time; time.sleep(5)", { timeoutSeconds: 0.5 });
  check(r.status === "timeout" && r.exitCode === 124, "timeoutSeconds", r);
});

await test("tasks_submit_list_paging_get_cancel", async () => {
  const c = sbx.forClone({ tenant: "tspager", cloneId: "c1" });
  const ids = [];
  for (let i = 0; i < 7; i++) ids.push((await c.tasks.submit(["/bin/sh", "-c", `echo ${i}`])).id);
  check(new Set(ids).size === 7, "seven tasks", ids);
  for (const [n, id] of ids.entries()) {
    const t = await c.tasks.wait(id, { timeoutMs: 60000 });
    check(t.status === "succeeded" && t.result?.stdout === `${n}\n`, "each ran", t);
  }
  let page = await c.tasks.list({ limit: 3 });
  check(page.tasks.length === 3 && page.nextCursor, "a page of 3 with a cursor", page);
  const seen = [];
  let cursor;
  let pages = 0;
  for (;;) {
    page = await c.tasks.list({ limit: 3, cursor });
    seen.push(...page.tasks.map((t) => t.id));
    pages++;
    if (!page.nextCursor) break;
    cursor = page.nextCursor;
  }
  check(seen.length === 7 && pages >= 3, "cursor paging", { seen, pages });
  check(JSON.stringify(seen) === JSON.stringify([...ids].reverse()), "each once, newest first", { seen, ids });
  const all = [];
  for await (const t of c.tasks.iterate({ pageSize: 2 })) all.push(t.id);
  check(JSON.stringify(all) === JSON.stringify(seen), "iterate follows the cursors", all);
  const bad = await c.tasks.submit("exit 1");
  await c.tasks.wait(bad.id, { timeoutMs: 60000 });
  const failedOnly = await c.tasks.list({ status: "failed" });
  check(failedOnly.tasks.length === 1 && failedOnly.tasks[0].id === bad.id, "status filter", failedOnly);
  const long = await c.tasks.submit(["sleep", "30"]);
  check(["pending", "running"].includes(long.status), "submitted at once", long);
  check((await c.tasks.cancel(long.id)).id === long.id, "cancel answers the task");
  check((await c.tasks.wait(long.id, { timeoutMs: 30000 })).status === "canceled", "canceled");
  let e = await rejects(ConflictError, () => c.tasks.cancel(long.id));
  check(e.status === 409 && e.code === "conflict", "an ended task: 409", e);
  e = await rejects(NotFoundError, () => c.tasks.get("nosuchtask"));
  check(e.status === 404 && e.code === "not_found" && e.message.includes("nosuchtask"), "unknown: 404", e);
  const slow = await c.tasks.submit(["sleep", "5"]);
  await rejects(TaskTimeoutError, () => c.tasks.wait(slow.id, { timeoutMs: 300 }));
  await c.tasks.cancel(slow.id);
});

await test("files_round_trip_streamed", async () => {
  const f = sbx.forClone({ tenant: "tsfiles", cloneId: "c1" });
  check((await f.files.put("hello.txt", "hé\n")).size === 4, "text put");
  check((await f.files.getText("hello.txt")) === "hé\n", "text get");
  await f.exec("mkdir -p data");
  const blob = crypto.randomBytes(12 << 20);
  const src = path.join(E.SBX_TMP, "ts-blob.bin");
  fs.writeFileSync(src, blob);
  // a Node read stream: an async iterable, streamed (chunked)
  const up = await f.files.put("data/blob.bin", fs.createReadStream(src, { highWaterMark: 256 << 10 }));
  check(up.size === blob.length, "12 MiB uploaded from a read stream", up);
  const sum = crypto.createHash("sha256").update(blob).digest("hex");
  const r = await f.exec(["sha256sum", "data/blob.bin"]);
  check(r.stdout.split(" ")[0] === sum, "same bytes inside", r);
  // downloaded chunk by chunk into a file
  const dest = path.join(E.SBX_TMP, "ts-back.bin");
  const out = fs.openSync(dest, "w");
  let chunks = 0;
  for await (const chunk of f.files.download("data/blob.bin")) {
    fs.writeSync(out, chunk);
    chunks++;
  }
  fs.closeSync(out);
  const back = fs.readFileSync(dest);
  check(back.equals(blob) && chunks > 1, "12 MiB downloaded in chunks", { chunks, n: back.length });
  const small = new Uint8Array([0, 1, 2, 255]);
  await f.files.put("data/small.bin", small);
  check(Buffer.from(await f.files.get("data/small.bin")).equals(Buffer.from(small)), "bytes round trip");
  const ls = await f.files.list("data");
  const names = ls.entries.map((e) => e.name).sort();
  check(JSON.stringify(names) === '["blob.bin","small.bin"]', "listing", ls);
  check(ls.entries.find((e) => e.name === "blob.bin").size === blob.length, "entry size", ls);
  check((await f.files.list()).entries.some((e) => e.name === "hello.txt"), "the root");
  await rejects(SandboxError, () => f.files.get("data"));
  await f.files.delete("data/small.bin");
  let e = await rejects(NotFoundError, () => f.files.get("data/small.bin"));
  check(e.code === "not_found", "deleted", e);
  e = await rejects(BadRequestError, () => f.files.get("../etc/passwd"));
  check(e.status === 400 && e.code === "bad_request", "a path outside: 400", e);
  // Over the 64 MiB quota: refused. The daemon answers (413 for a declared
  // size, before a byte is read; 507 or 413 for a streamed one) and closes;
  // fetch reads that answer when the race lets it, else reports the closed
  // connection (a ConnectionError saying why it may have been).
  const big = new Uint8Array(65 << 20);
  const streamed = () => new ReadableStream({
    start(c) {
      for (let o = 0; o < big.length; o += 1 << 20) c.enqueue(big.subarray(o, o + (1 << 20)));
      c.close();
    },
  });
  for (const body of [big, streamed()]) {
    e = await rejects(SandboxError, () => f.files.put("big.bin", body));
    check((e.status === 413 && e.code === "too_large") || (e.status === 507 && e.code === "insufficient_storage") ||
      (e instanceof ConnectionError && e.status === 0), "over the quota: refused", e);
  }
  check((await f.files.list()).entries.every((x) => x.name !== "big.bin"), "nothing left behind");
});

await test("sessions_exec_network_stop", async () => {
  await sbx.withSession("ts1", async (s) => {
    check(s.id === "ts1", "named session", s.id);
    let r = await s.exec("echo kept > /tmp/note");
    check(r.exitCode === 0, "first task", r);
    r = await s.exec(["cat", "/tmp/note"]);
    check(r.stdout === "kept\n", "/tmp persists within the session", r);
    const t = await s.submit(["cat", "/tmp/note"]);
    check((await sbx.tasks.wait(t.id, { timeoutMs: 30000 })).result?.stdout === "kept\n", "a submitted task too");
  });
  const r = await sbx.exec("cat /tmp/note 2>&1 || echo gone");
  check(r.stdout.includes("gone"), "a one-shot sandbox does not see it", r);
  const st = await sbx.sessions.start();
  check(st.ok && st.status === "ready" && st.sessionId, "a generated id", st);
  // stopping a session leaves the clone's runtime ready; the session is gone
  const stopped = await sbx.sessions.stop(st.sessionId);
  check(stopped.ok && stopped.runtime?.sessionLive === false, "stopped", stopped);
  const probe = "getent hosts svc.test >/dev/null && echo yes || echo no";
  await sbx.withSession("tsweb", async (s) => {
    check((await s.exec(probe)).stdout === "yes\n", "answered before");
    const e = await rejects(BadRequestError, () => s.network({ allow: ["bad..x"] }));
    check(e.message.includes("bad..x"), "a bad rule named", e);
    const ch = await s.network({ deny: ["svc.test"] });
    check(ch.ok && ch.sessionId === "tsweb", "changed", ch);
    check((await s.exec(probe)).stdout === "no\n", "refused after the change");
  });
  const e = await rejects(NotFoundError, () => sbx.sessions.network("nosuch", { deny: ["x.test"] }));
  check(e.status === 404, "unknown session", e);
});

async function untilFinished(it, taskId) {
  const events = [];
  for await (const ev of it) {
    events.push(ev);
    if (ev.type === "exec_finished" && ev.data.taskId === taskId) break;
  }
  return events;
}

await test("stream_resumes_after_drops_losing_nothing", async () => {
  const via = new Sandbox({ baseUrl: E.SBX_RELAY, token: E.SBX_TOKEN });
  const it = via.stream("tsx", { lastEventId: 0, retryDelayMs: 50 });
  const first = it.next(); // opens the stream before the task exists
  const tid = (await sbx.tasks.submit("for i in $(seq 1 120); do echo line-$i; sleep 0.01; done", { session: "tsx" })).id;
  const head = await first;
  const got = [head.value, ...(await untilFinished(it, tid))];
  const ids = got.map((e) => e.id);
  check(ids.every((id, i) => i === 0 || id > ids[i - 1]), "ids increasing, none twice", ids);
  const out = got.filter((e) => e.type === "tool_call_output" && e.data.taskId === tid).map((e) => e.data.data).join("");
  let want = "";
  for (let i = 1; i <= 120; i++) want += `line-${i}\n`;
  check(out === want, "every output byte once", out);
  const direct = await untilFinished(sbx.stream("tsx", { lastEventId: 0 }), tid);
  const key = (evs) => JSON.stringify(evs.map((e) => [e.id, e.type, e.data]));
  check(key(direct) === key(got), "identical to a replay without drops", { direct: direct.length, got: got.length });
  check(got.every((e) => e.sessionId === "tsx" && e.time), "event fields", got.slice(0, 2));
  // no reconnecting: a failure ends the iterator with ConnectionError
  const none = new Sandbox({ baseUrl: "http://127.0.0.1:1", token: E.SBX_TOKEN });
  await rejects(ConnectionError, () => none.stream("z", { reconnect: false }).next());
  await rejects(ConnectionError, () => none.stream("z", { maxRetries: 2, retryDelayMs: 10 }).next());
  // an abort signal ends the iteration quietly
  const ac = new AbortController();
  const live = sbx.stream("tsquiet", { signal: ac.signal });
  setTimeout(() => ac.abort(), 200);
  const end = await live.next();
  check(end.done === true, "aborted: done", end);
});

await test("errors_carry_the_api_code", async () => {
  const bad = new Sandbox({ baseUrl: E.SBX_URL, token: "x".repeat(32) });
  let e = await rejects(UnauthorizedError, () => bad.exec(["true"]));
  check(e.status === 401 && e.code === "unauthorized" && e instanceof SandboxError, "bad token", e);
  e = await rejects(BadRequestError, () => sbx.runCode("x", { language: "cobol" }));
  check(e.status === 400 && e.code === "bad_request" && e.apiMessage.includes("cobol"), "bad input", e);
  e = await rejects(BadRequestError, () => sbx.exec(["true"], { memoryMB: 1 << 20 }));
  check(e.message.includes("memoryMB"), "the message names the field", e);
  e = await rejects(ForbiddenError, () => new Sandbox({ baseUrl: E.SBX_URL, token: E.SBX_ACME_TOKEN, tenant: "other" }).exec(["true"]));
  check(e.status === 403 && e.code === "forbidden", "another tenant", e);
  await rejects(TypeError, () => sbx.exec([]));
  e = await rejects(ConnectionError, () => new Sandbox({ baseUrl: "http://127.0.0.1:1", token: "t" }).exec(["true"]));
  check(e.status === 0, "no daemon", e);
});

await test("skills_list_get_reload_activate_run", async () => {
  const c = sbx.forClone({ tenant: "tsskl", cloneId: "c1" });
  const SK = E.SBX_SKILL;
  const cat = new Map((await c.skills.list()).map((s) => [s.name, s]));
  const u = cat.get("ur-api");
  check(u && u.source === "builtin" && u.trustLevel === "builtin" && u.enabled === true &&
        JSON.stringify(u.actions) === '["check","get-self"]', "ur-api in the catalog, builtin", [...cat.keys()]);
  const h = await c.skills.get(SK);
  check(h.source === "shared" && h.trustLevel === "trusted" && JSON.stringify(h.versions) === '["v1","v2"]' &&
        h.version === "v1" && h.activeDir?.endsWith("/versions/v1") && h.description === "greets, v1",
        "the shared skill made by the test, v1 current", h);
  const names = (await c.skills.reload()).map((s) => s.name);
  check(names.includes("ur-api") && names.includes(SK), "reload answers the fresh catalog", names);
  let r = await c.skills.exec(SK, "greet", ["a", "b c"]);
  check(r.exitCode === 0 && r.stdout === `${SK} v1 a b c\n`, "skills.exec runs v1", r);
  let t = await c.skills.run(SK, "greet", ["x"]);
  check(t.skill === SK && t.skillSource === "shared" && t.skillTrustLevel === "trusted", "the task names its skill", t);
  t = await c.tasks.wait(t.id, { timeoutMs: 60000 });
  check(t.status === "succeeded" && t.result?.stdout === `${SK} v1 x\n`, "skills.run ran the action", t);
  const a = await c.skills.activate(SK, "v2");
  check(a.version === "v2" && a.activeDir?.endsWith("/versions/v2"), "activated v2", a);
  r = await c.skills.exec(SK, "greet", ["y"]);
  check(r.stdout === `${SK} v2 y\n`, "the next run prints v2", r);
  r = await sbx.forClone({ tenant: "tsskl", cloneId: "c2" }).skills.exec(SK, "greet");
  check(r.stdout === `${SK} v1 \n`, "the activation is the clone's own", r);
  let e = await rejects(BadRequestError, () => c.skills.activate("nosuchskill", "v1"));
  check(e.status === 400 && e.code === "bad_request" && e.apiMessage.includes("skill not found: nosuchskill"),
        "activate unknown: 400", e);
  e = await rejects(BadRequestError, () => c.skills.activate(SK, "v9"));
  check(e.code === "bad_request" && e.apiMessage.includes("version not found: v9"), "unknown version: 400", e);
  e = await rejects(ConflictError, () => c.skills.activate("ur-api", "v1"));
  check(e.status === 409 && e.code === "conflict", "a builtin skill: 409", e);
  e = await rejects(NotFoundError, () => c.skills.get("nosuchskill"));
  check(e.status === 404 && e.code === "not_found", "get unknown: 404", e);
  e = await rejects(BadRequestError, () => c.skills.run(SK, "nosuchaction"));
  check(e.apiMessage.includes("unsupported skill action"), "an unknown action named", e);
});

await test("turns_tool_calls_and_cancel", async () => {
  const tools = await sbx.tools();
  check(tools[0]?.name === "exec" && tools[0].parameters?.type === "object" &&
        tools.some((t) => t.name === "python"), "GET /runtime/tools", tools);
  await sbx.withSession("tsturns", async (s) => {
    await s.exec("echo kept > /tmp/k");
    const tid = await s.toolCalls([
      toolCall("exec", { command: "cat /tmp/k; echo oops >&2; exit 3" }, "c1"),
      toolCall("python", { code: "print(6*7)" }, "c2"),
    ]);
    check(typeof tid === "string" && tid.length > 0, "turn id", tid);
    const res = await s.waitTurn(tid);
    check(res.turnId === tid && res.stopReason === "completed" && !res.error, "done completed", res);
    check(res.calls.map((c) => c.callId).join() === "c1,c2", "both calls, in order", res.calls);
    const c1 = res.calls[0];
    check(c1.name === "exec" && c1.exitCode === 3 && c1.outcome === "exited" && c1.result.includes("kept") &&
          c1.result.includes("[stderr]") && c1.output.includes("oops") && typeof c1.usage?.wallSeconds === "number",
          "tool_call_end of the exec call: ran in the session's sandbox", c1);
    check(res.calls[1].result.trim() === "42", "python call", res.calls[1]);
    check(res.events[0].type === "turn_started" && res.events.at(-1).type === "done", "start to done", res.events.map((e) => e.type));
    // a turn running sleep 30, canceled
    const long = await s.toolCalls([toolCall("exec", { command: "echo started; sleep 30" })]);
    const e = await rejects(ConflictError, () => s.toolCalls([toolCall("exec", { command: "true" })]));
    check(e.code === "conflict" && e.apiMessage.includes(long), "one turn at a time: 409", e);
    const t0 = Date.now();
    const seen = [];
    for await (const ev of s.followTurn(long)) {
      seen.push(ev);
      if (ev.type === "tool_call_output" && ev.data.text?.includes("started")) {
        const ans = await sbx.cancelTurn(long);
        check(ans.ok === true && ans.turnId === long, "cancel accepted", ans);
      }
    }
    const done = turnResult(long, seen);
    check(done.stopReason === "canceled" && done.calls[0].outcome === "canceled", "done canceled, the call killed", done);
    check(Date.now() - t0 < 25000, "well before the sleep's end");
    const e2 = await rejects(NotFoundError, () => sbx.cancelTurn(long));
    check(e2.status === 404, "an ended turn: 404", e2);
    const again = await s.runToolCalls([toolCall("exec", { command: "echo again" }, "a")]);
    check(again.calls[0].result.trim() === "again", "the session takes turns again", again);
  });
  const e = await rejects(NotFoundError, () => sbx.toolCalls("nosuchsession", []));
  check(e.status === 404, "no live session: 404", e);
});

console.log(`sdk-node: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
