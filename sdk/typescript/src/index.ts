/**
 * TypeScript client of the sandbox daemon's HTTP API (`sandboxd serve`).
 * ESM, no runtime dependency: the global fetch of Node >= 18 (or a browser,
 * Deno, Bun). Streams are async iterators; the event stream resumes by
 * Last-Event-ID after a dropped connection.
 *
 *   import { Sandbox } from "@sandbox/sdk";
 *   const sbx = new Sandbox({ baseUrl: "http://127.0.0.1:8080", token });
 *   console.log((await sbx.exec(["python3", "-c", "print(6*7)"])).stdout);
 */

export const VERSION = "0.1.0";

/** Sent with every request: the daemon then answers its extended keys (task
 * ids in exec answers, reports, tenancy, session ids, cursors); without it
 * the routes answer exactly the original service's keys. */
export const EXTENDED_HEADER = ["X-Sandbox-Extended", "1"] as const;

// ---- results (the API's JSON; keys this version does not know stay there) ----

export interface Limits {
  memoryBytes?: number;
  memoryEnforced?: string;
  pids?: number;
  cpu?: number;
  cpuEnforced?: boolean;
  timeoutSeconds?: number;
  fileSizeBytes?: number;
  outputLimitBytes?: number;
  enforcedBy?: string;
  [key: string]: unknown;
}

/** How a run ended. */
export interface Report {
  outcome: "exited" | "signaled" | "timeout" | "oom" | "setup_error" | "canceled" | string;
  exitCode: number;
  signal?: number;
  wallSeconds?: number;
  cpuSeconds?: number;
  peakMemoryBytes?: number;
  oomKilled?: boolean;
  stdoutBytes?: number;
  stderrBytes?: number;
  stdoutTruncated?: boolean;
  stderrTruncated?: boolean;
  limits?: Limits;
  cgroupMode?: string;
  message?: string;
  network?: unknown;
  [key: string]: unknown;
}

export type TaskStatus =
  | "pending" | "running" | "succeeded" | "failed" | "canceled" | "timeout" | "interrupted";

export const FINAL_STATUSES: ReadonlySet<string> = new Set([
  "succeeded", "failed", "canceled", "timeout", "interrupted",
]);

/** The answer of exec / runCode: the task ran to its end. */
export interface ExecResult {
  taskId?: string;
  exitCode: number;
  stdout: string;
  stderr: string;
  startedAt?: string | null;
  endedAt?: string | null;
  status?: TaskStatus | string;
  error?: string;
  report?: Report | null;
  [key: string]: unknown;
}

export interface TaskResult {
  exitCode: number;
  stdout?: string;
  stderr?: string;
  startedAt?: string | null;
  endedAt?: string | null;
  report?: Report;
  [key: string]: unknown;
}

export interface Task {
  id: string;
  command: string[];
  backend?: string;
  skill?: string;
  skillSource?: string;
  skillTrustLevel?: string;
  status: TaskStatus | string;
  createdAt?: string | null;
  startedAt?: string | null;
  endedAt?: string | null;
  error?: string;
  tenantCode?: string;
  cloneKey?: string;
  cloneId?: string;
  sessionId?: string;
  language?: string;
  result?: TaskResult | null;
  [key: string]: unknown;
}

export interface TaskPage {
  tasks: Task[];
  /** "" on the last page. */
  nextCursor: string;
}

export interface FileEntry {
  name: string;
  type: "file" | "dir" | "symlink" | "other" | string;
  size: number;
  mode: number;
  mtime?: string | null;
  [key: string]: unknown;
}

export interface Listing {
  path: string;
  entries: FileEntry[];
  truncated: boolean;
  [key: string]: unknown;
}

export interface Upload {
  ok: boolean;
  size: number;
  [key: string]: unknown;
}

export interface SessionState {
  ok: boolean;
  /** The clone runtime's state (ready, busy, stopped). */
  status?: string;
  sessionId?: string;
  /** The whole status object start and stop answer with. */
  runtime?: Record<string, unknown>;
  [key: string]: unknown;
}

/* start and stop answer {ok, status: <the runtime's status object>, sessionId}. */
function sessionState(r: SessionState): SessionState {
  const st = r.status as unknown;
  if (st && typeof st === "object") {
    const o = st as Record<string, unknown>;
    return { ...r, status: String(o.status ?? ""), runtime: o,
             sessionId: r.sessionId ?? (o.sessionId as string | undefined) };
  }
  return r;
}

export interface RuntimeStatus {
  runtimeId: string;
  tenantCode: string;
  cloneId: string;
  cloneKey: string;
  sessionId: string;
  workspace: string;
  status: string;
  startedAt?: string | null;
  lastEventAt?: string | null;
  running?: number;
  queued?: number;
  [key: string]: unknown;
}

export interface SkillInfo {
  name: string;
  source?: string;
  trustLevel?: string;
  rootDir?: string;
  activeDir?: string;
  cliPath?: string;
  actions?: string[];
  version?: string;
  versions?: string[];
  enabled?: boolean;
  scanVerdict?: string;
  blockedReason?: string;
  /** What SKILL.md says (the extended answer, which the SDK asks for). */
  description?: string;
  homepage?: string;
  shadows?: { source: string; rootDir: string }[];
  [key: string]: unknown;
}

/** A tool turns may call (GET /runtime/tools): its JSON schema. */
export interface ToolSpec {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
  external?: boolean;
  [key: string]: unknown;
}

/** One call of a tool_calls turn (OpenAI's shape); arguments an object or a JSON string. */
export interface ToolCall {
  id: string;
  name: string;
  arguments: Record<string, unknown> | string;
}

/** A turn's input, as POST /runtime/turn takes it. */
export type TurnInput =
  | { type: "tool_calls"; calls: ToolCall[]; parallel?: boolean }
  | { type: "user_message"; text: string }
  | { type: "tool_result"; callId: string; output: unknown };

/** One tool call of a turn, from its tool_call_start, _output and _end
 * events. `result` is what is fed back to the model (capped); `output` the
 * whole output the stream carried. */
export interface ToolCallResult {
  callId: string;
  name: string;
  arguments?: unknown;
  external?: boolean;
  exitCode?: number | null;
  /** exited, timeout, canceled, tool_error, external...; "" while running. */
  outcome: string;
  result: string;
  truncated?: boolean;
  usage?: { wallSeconds?: number; cpuSeconds?: number; peakMemoryBytes?: number };
  output: string;
}

/** A turn followed to its done. */
export interface TurnResult {
  turnId: string;
  /** completed, canceled, the model's finish reason, error, budget, interrupted. */
  stopReason: string;
  calls: ToolCallResult[];
  /** The model's text (its text_delta events). */
  text: string;
  /** The runtime_error's data ({turnId, reason, message}) when there was one. */
  error?: Record<string, any>;
  usage?: Record<string, number>;
  events: SandboxEvent[];
}

/** The typed summary of a turn's events (from turn_started to done). */
export function turnResult(turnId: string, events: SandboxEvent[]): TurnResult {
  const t: TurnResult = { turnId, stopReason: "", calls: [], text: "", events };
  const byId = new Map<string, ToolCallResult>();
  for (const ev of events) {
    const d = ev.data ?? {};
    if (ev.type === "tool_call_start") {
      const c: ToolCallResult = { callId: d.callId, name: d.name, arguments: d.arguments,
                                  external: !!d.external, outcome: "", result: "", output: "" };
      byId.set(c.callId, c);
      t.calls.push(c);
    } else if (ev.type === "tool_call_output") {
      const c = byId.get(d.callId);
      if (c) c.output += d.text ?? "";
    } else if (ev.type === "tool_call_end") {
      let c = byId.get(d.callId);
      if (!c) {
        c = { callId: d.callId, name: d.name, outcome: "", result: "", output: "" };
        byId.set(c.callId, c);
        t.calls.push(c);
      }
      Object.assign(c, { exitCode: d.exitCode, outcome: d.outcome ?? "", result: d.result ?? "",
                         truncated: !!d.truncated, usage: d.usage });
    } else if (ev.type === "text_delta") {
      t.text += d.text ?? "";
    } else if (ev.type === "runtime_error") {
      t.error = d;
    } else if (ev.type === "done") {
      t.stopReason = d.stopReason ?? "";
      if (d.usage) t.usage = d.usage;
    }
  }
  return t;
}

/** One call of a tool_calls turn (an id made up when none is given). */
export function toolCall(name: string, args: Record<string, unknown> | string = {}, id?: string): ToolCall {
  const rnd = Math.random().toString(16).slice(2, 14);
  return { id: id ?? `call-${rnd}`, name, arguments: args };
}

/** One event of a session's stream. `id` orders it (a resume sends it as
 * Last-Event-ID); `data` is the event's own payload. */
export interface SandboxEvent {
  id: number | null;
  type: string;
  time?: string | null;
  sessionId?: string;
  data: Record<string, any>;
  [key: string]: unknown;
}

// ---- requests ----

export interface NetworkRules {
  policy?: "none" | "proxy" | "host";
  default?: "allow" | "deny";
  allow?: string[];
  deny?: string[];
}

export interface RunOptions {
  env?: Record<string, string>;
  stdin?: string;
  timeoutSeconds?: number;
  memoryMB?: number;
  pids?: number;
  cpu?: number;
  /** Run in this live session's sandbox. */
  session?: string;
  network?: NetworkRules;
  /** Abort the request (the task goes on: cancel it with tasks.cancel). */
  signal?: AbortSignal;
}

export type Command = string | string[];

export interface SandboxOptions {
  /** e.g. "http://127.0.0.1:8080" (default: $SANDBOX_URL where there is a process.env). */
  baseUrl?: string;
  /** The API token (default: $SANDBOX_TOKEN). */
  token?: string;
  /** The clone the calls act for (X-Tenant-Code, X-Clone-Key, X-Clone-Id). */
  tenant?: string;
  cloneKey?: string;
  cloneId?: string;
  /** Extra headers for every request. */
  headers?: Record<string, string>;
  /** A fetch of your own (default: the global one). */
  fetch?: typeof fetch;
  /** Milliseconds to wait for an answer (default 30000; exec waits for its
   * task's own timeout plus a margin). */
  timeoutMs?: number;
}

export interface StreamOptions {
  /** Begin after event N (0: every stored event); without it no
   * Last-Event-ID is sent at first, and the daemon sends live events only. */
  lastEventId?: number;
  /** Reopen after a drop (default true). */
  reconnect?: boolean;
  /** Consecutive failed reopenings before giving up (default: no bound). */
  maxRetries?: number;
  /** First pause before a reopening, in ms (default 500; grows with each failure). */
  retryDelayMs?: number;
  /** A connection silent this long is dropped and reopened (default 45000:
   * the daemon sends a heartbeat every 15 s). */
  idleTimeoutMs?: number;
  signal?: AbortSignal;
}

// ---- errors ----

/** Every failed call throws a SandboxError: the HTTP status (0 when no answer
 * came), the API's error code ("bad_request", "not_found"...) and message. */
export class SandboxError extends Error {
  readonly status: number;
  readonly code: string;
  readonly body: unknown;
  constructor(message: string, status = 0, code = "", body: unknown = undefined) {
    super(status ? `${status} ${code || "error"}: ${message}` : message);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.body = body;
  }
  /** The API's message alone. */
  get apiMessage(): string {
    const m = this.message.match(/^\d+ [^:]*: ([\s\S]*)$/);
    return m ? m[1] : this.message;
  }
}
export class BadRequestError extends SandboxError {}
export class UnauthorizedError extends SandboxError {}
export class ForbiddenError extends SandboxError {}
export class NotFoundError extends SandboxError {}
export class ConflictError extends SandboxError {}
export class TooLargeError extends SandboxError {}
export class TooManyRequestsError extends SandboxError {}
export class ServerError extends SandboxError {}
/** No answer: the daemon could not be reached or the connection broke. */
export class ConnectionError extends SandboxError {}
/** tasks.wait gave up before the task ended (the task goes on). */
export class TaskTimeoutError extends SandboxError {}

const BY_STATUS: Record<number, typeof SandboxError> = {
  400: BadRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  409: ConflictError,
  413: TooLargeError,
  429: TooManyRequestsError,
};

async function errorFrom(res: Response): Promise<SandboxError> {
  let text = "";
  try {
    text = await res.text();
  } catch {
    /* the body broke: the status still says what happened */
  }
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    /* not JSON: kept as text */
  }
  let code = "";
  let message = "";
  const err = (body as any)?.error;
  if (err && typeof err === "object") {
    code = String(err.code ?? "");
    message = String(err.message ?? "");
  } else if (typeof err === "string") {
    message = err;
  }
  if (!message) message = text.trim().slice(0, 500) || res.statusText || `HTTP ${res.status}`;
  const Cls = BY_STATUS[res.status] ?? (res.status >= 500 ? ServerError : SandboxError);
  return new Cls(message, res.status, code, body);
}

function connectionError(what: string, e: unknown): ConnectionError {
  const cause = (e as any)?.cause;
  const detail = cause?.code || cause?.message || (e as any)?.message || String(e);
  return new ConnectionError(`${what}: ${detail}`);
}

// ---- the event-stream parser ----

interface Frame {
  id: string | null;
  event: string;
  data: string;
}

/** Incremental SSE parsing (the WHATWG rules): text in, complete frames out.
 * The last event id moves only when a frame is complete, so a frame cut by a
 * dropped connection is replayed whole by the resume. */
export class SSEParser {
  lastId: string | null;
  retryMs: number | null = null;
  private buf = "";
  private data: string[] = [];
  private event = "";
  private idBuf: string | null;
  private first = true;

  constructor(lastId: string | null = null) {
    this.lastId = lastId;
    this.idBuf = lastId;
  }

  feed(text: string): Frame[] {
    this.buf += text;
    const out: Frame[] = [];
    let start = 0;
    for (;;) {
      const nl = this.buf.slice(start).search(/[\r\n]/);
      if (nl < 0) break;
      const i = start + nl;
      let end = i + 1;
      if (this.buf[i] === "\r") {
        if (i + 1 === this.buf.length) break; // is an LF next? wait for more
        if (this.buf[i + 1] === "\n") end = i + 2;
      }
      let line = this.buf.slice(start, i);
      start = end;
      if (this.first) {
        this.first = false;
        if (line.startsWith("\ufeff")) line = line.slice(1);
      }
      this.line(line, out);
    }
    this.buf = this.buf.slice(start);
    return out;
  }

  private line(line: string, out: Frame[]): void {
    if (line === "") {
      this.lastId = this.idBuf;
      if (this.data.length) {
        out.push({ id: this.idBuf, event: this.event || "message", data: this.data.join("\n") });
      }
      this.data = [];
      this.event = "";
      return;
    }
    if (line.startsWith(":")) return; // a comment: heartbeats
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id") {
      if (!value.includes("\0")) this.idBuf = value;
    } else if (field === "retry" && /^\d+$/.test(value)) this.retryMs = Number(value);
  }
}

function toEvent(f: Frame): SandboxEvent {
  let body: any;
  try {
    body = JSON.parse(f.data);
  } catch {
    body = { type: f.event, data: f.data };
  }
  if (!body || typeof body !== "object" || Array.isArray(body)) body = { type: f.event, data: body };
  const ev: SandboxEvent = { ...body, id: null, type: body.type || f.event, data: body.data ?? {} };
  if (f.id !== null && /^\d+$/.test(f.id)) ev.id = Number(f.id);
  else if (typeof body.id === "number") ev.id = body.id;
  return ev;
}

// ---- the client ----

type Query = Record<string, string | number | undefined | null>;

interface RequestInit2 {
  method?: string;
  query?: Query;
  json?: unknown;
  body?: any;
  headers?: Record<string, string>;
  timeoutMs?: number | null;
  signal?: AbortSignal;
}

function command(cmd: Command): string[] {
  if (typeof cmd === "string") return ["/bin/sh", "-c", cmd];
  if (!Array.isArray(cmd) || cmd.length === 0 || cmd.some((a) => typeof a !== "string")) {
    throw new TypeError("command must be a shell string or a non-empty array of strings");
  }
  return [...cmd];
}

function taskBody(base: Record<string, unknown>, o: RunOptions = {}): Record<string, unknown> {
  const body: Record<string, unknown> = { ...base };
  const opt: Record<string, unknown> = {
    env: o.env, stdin: o.stdin, timeoutSeconds: o.timeoutSeconds, memoryMB: o.memoryMB,
    pids: o.pids, cpu: o.cpu, sessionID: o.session, network: o.network,
  };
  for (const [k, v] of Object.entries(opt)) if (v !== undefined && v !== null) body[k] = v;
  return body;
}

function netBody(rules: { default?: string; allow?: string[]; deny?: string[] }) {
  const b: Record<string, unknown> = {};
  if (rules.default !== undefined) b.default = rules.default;
  if (rules.allow !== undefined) b.allow = rules.allow;
  if (rules.deny !== undefined) b.deny = rules.deny;
  return b;
}

const seg = encodeURIComponent;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function env(name: string): string | undefined {
  const p = (globalThis as any).process;
  return p?.env?.[name];
}

/** A body for files.put: anything fetch takes, or an async iterable of bytes
 * (a Node stream from fs.createReadStream), which is streamed. */
export type UploadBody =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array>;

function asStream(it: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  const iter = it[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(ctl) {
      const { value, done } = await iter.next();
      if (done) ctl.close();
      else ctl.enqueue(value instanceof Uint8Array ? value : new Uint8Array(value as any));
    },
    async cancel() {
      await iter.return?.();
    },
  });
}

export class Sandbox {
  readonly baseUrl: string;
  readonly tenant?: string;
  readonly cloneKey?: string;
  readonly cloneId?: string;
  readonly tasks: Tasks;
  readonly files: Files;
  readonly sessions: Sessions;
  readonly skills: Skills;
  private readonly opts: SandboxOptions;
  private readonly token?: string;
  private readonly fetchFn: typeof fetch;
  private readonly timeoutMs: number;

  constructor(opts: SandboxOptions = {}) {
    this.opts = opts;
    const base = opts.baseUrl ?? env("SANDBOX_URL") ?? "http://127.0.0.1:8080";
    if (!/^https?:\/\/[^/]/.test(base)) throw new TypeError(`baseUrl must be an http(s) URL, not ${base}`);
    this.baseUrl = base.replace(/\/+$/, "");
    this.token = opts.token ?? env("SANDBOX_TOKEN");
    this.tenant = opts.tenant;
    this.cloneKey = opts.cloneKey;
    this.cloneId = opts.cloneId;
    const f = opts.fetch ?? (globalThis as any).fetch;
    if (typeof f !== "function") throw new TypeError("no fetch: Node >= 18 or a fetch option");
    this.fetchFn = f;
    this.timeoutMs = opts.timeoutMs ?? 30000;
    this.tasks = new Tasks(this);
    this.files = new Files(this);
    this.sessions = new Sessions(this);
    this.skills = new Skills(this);
  }

  /** The same daemon and token, acting for another clone. */
  forClone(clone: { tenant?: string; cloneKey?: string; cloneId?: string }): Sandbox {
    return new Sandbox({ ...this.opts, baseUrl: this.baseUrl, token: this.token, ...clone });
  }

  // ---- HTTP ----

  /** @internal */
  headers(extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { [EXTENDED_HEADER[0]]: EXTENDED_HEADER[1] };
    if (this.token) h["Authorization"] = `Bearer ${this.token}`;
    if (this.tenant !== undefined) h["X-Tenant-Code"] = this.tenant;
    if (this.cloneKey !== undefined) h["X-Clone-Key"] = this.cloneKey;
    if (this.cloneId !== undefined) h["X-Clone-Id"] = this.cloneId;
    return { ...h, ...this.opts.headers, ...extra };
  }

  /** @internal The answer of status < 400 (its body unread), else throws. */
  async open(path: string, init: RequestInit2 = {}): Promise<Response> {
    const method = init.method ?? "GET";
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(init.query ?? {})) {
      if (v !== undefined && v !== null) url.searchParams.set(k, String(v));
    }
    const headers = this.headers(init.headers);
    let body = init.body;
    if (init.json !== undefined) {
      body = JSON.stringify(init.json);
      headers["Content-Type"] = "application/json";
    }
    const ctl = new AbortController();
    const timeout = init.timeoutMs === undefined ? this.timeoutMs : init.timeoutMs;
    const timer = timeout === null ? undefined : setTimeout(() => ctl.abort(), timeout);
    const onAbort = () => ctl.abort();
    init.signal?.addEventListener("abort", onAbort);
    const req: any = { method, headers, body, signal: ctl.signal };
    if (body && typeof body === "object" && typeof (body as any).getReader === "function") {
      req.duplex = "half"; // a streamed request body
    }
    let res: Response;
    try {
      res = await this.fetchFn(url, req);
    } catch (e) {
      clearTimeout(timer);
      init.signal?.removeEventListener("abort", onAbort);
      if (ctl.signal.aborted && !init.signal?.aborted) {
        throw new ConnectionError(`${method} ${path}: no answer in ${timeout} ms`);
      }
      throw connectionError(`${method} ${path}`, e);
    }
    // The timer keeps guarding the body's read; callers clear it through
    // the response's end (done()).
    (res as any)._sbxDone = () => {
      clearTimeout(timer);
      init.signal?.removeEventListener("abort", onAbort);
    };
    if (res.status >= 400) {
      const err = await errorFrom(res);
      (res as any)._sbxDone();
      throw err;
    }
    return res;
  }

  /** @internal A JSON request and its JSON answer. */
  async call<T>(path: string, init: RequestInit2 = {}): Promise<T> {
    const res = await this.open(path, init);
    try {
      const text = await res.text();
      return (text ? JSON.parse(text) : undefined) as T;
    } catch (e) {
      if (e instanceof SyntaxError) {
        throw new SandboxError(`${init.method ?? "GET"} ${path}: the answer is not JSON`, res.status);
      }
      throw connectionError(`${init.method ?? "GET"} ${path}`, e);
    } finally {
      (res as any)._sbxDone();
    }
  }

  // ---- the daemon ----

  health(): Promise<{ ok: boolean }> {
    return this.call("/healthz");
  }

  status(session?: string): Promise<RuntimeStatus> {
    return this.call("/runtime/status", { query: { sessionID: session } });
  }

  // ---- run and wait ----

  /** Runs a command (an argv array, or a shell string for /bin/sh -c) and
   * waits for its end. A non-zero exit is a result, not an error. */
  exec(cmd: Command, opts: RunOptions = {}): Promise<ExecResult> {
    return this.runSync(taskBody({ command: command(cmd) }, opts), opts);
  }

  /** Runs code in a language the daemon knows ("python", "node", "shell"). */
  runCode(code: string, opts: RunOptions & { language?: string } = {}): Promise<ExecResult> {
    return this.runSync(taskBody({ language: opts.language ?? "python", code }, opts), opts);
  }

  /** @internal */
  runSkill(body: Record<string, unknown>, opts: RunOptions): Promise<ExecResult> {
    return this.runSync(body, opts);
  }

  private runSync(body: Record<string, unknown>, opts: RunOptions): Promise<ExecResult> {
    // The answer comes at the task's end: its timeout (the daemon's default,
    // 300 s, when none is given) plus a margin for the queue.
    const wait = Math.max(this.timeoutMs, ((opts.timeoutSeconds ?? 300) + 60) * 1000);
    return this.call("/runtime/exec", { method: "POST", json: body, timeoutMs: wait, signal: opts.signal });
  }

  // ---- the event stream ----

  /** The session's events, in order, each once, as an async iterator. A
   * dropped (or silent) connection is reopened with Last-Event-ID, so the
   * daemon replays what followed the last event received. Errors the daemon
   * answers (401, 404...) are thrown at once. Leaving the loop closes the
   * connection. */
  async *stream(session?: string, opts: StreamOptions = {}): AsyncGenerator<SandboxEvent, void, undefined> {
    let last: string | null = opts.lastEventId === undefined ? null : String(opts.lastEventId);
    const reconnect = opts.reconnect ?? true;
    let failures = 0;
    let delay = opts.retryDelayMs ?? 500;
    const idle = opts.idleTimeoutMs ?? 45000;
    for (;;) {
      const ctl = new AbortController();
      const onAbort = () => ctl.abort();
      opts.signal?.addEventListener("abort", onAbort);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const arm = () => {
        clearTimeout(timer);
        timer = setTimeout(() => ctl.abort(), idle);
      };
      let res: Response | undefined;
      try {
        const headers: Record<string, string> = { Accept: "text/event-stream", "Cache-Control": "no-cache" };
        if (last !== null) headers["Last-Event-ID"] = last;
        arm();
        res = await this.open("/runtime/stream", {
          query: { sessionID: session }, headers, timeoutMs: null, signal: ctl.signal,
        });
        const reader = res.body!.getReader();
        const dec = new TextDecoder();
        const parser = new SSEParser(last);
        try {
          for (;;) {
            arm();
            const { value, done } = await reader.read();
            if (done) break; // the daemon closed the stream: reopen
            for (const f of parser.feed(dec.decode(value, { stream: true }))) {
              const ev = toEvent(f);
              if (ev.id !== null && last !== null && /^\d+$/.test(last) && ev.id <= Number(last)) {
                continue; // already delivered
              }
              if (f.id !== null) last = f.id;
              failures = 0;
              yield ev;
            }
            if (parser.retryMs !== null) delay = parser.retryMs;
          }
        } finally {
          await reader.cancel().catch(() => {});
        }
      } catch (e) {
        if (opts.signal?.aborted) return;
        if (e instanceof SandboxError && !(e instanceof ConnectionError)) throw e;
        if (!reconnect) throw e instanceof SandboxError ? e : connectionError("event stream", e);
      } finally {
        clearTimeout(timer);
        (res as any)?._sbxDone?.();
        opts.signal?.removeEventListener("abort", onAbort);
        ctl.abort();
      }
      if (!reconnect) return;
      failures++;
      if (opts.maxRetries !== undefined && failures > opts.maxRetries) {
        throw new ConnectionError(`event stream: ${opts.maxRetries} reconnections failed`);
      }
      await sleep(Math.min(delay * failures, 10000));
    }
  }

  // ---- agent turns ----

  /** The built-in tools a turn may call, with their JSON schemas. */
  async tools(): Promise<ToolSpec[]> {
    const data = await this.call<{ tools: ToolSpec[] }>("/runtime/tools");
    return data?.tools ?? [];
  }

  /** Starts a turn on a live session; resolves to its id at once (follow it
   * with followTurn / waitTurn). A session with a turn going on throws
   * ConflictError, an unknown session NotFoundError. */
  async turn(session: string, input: TurnInput): Promise<string> {
    const data = await this.call<{ ok: boolean; turnId: string }>("/runtime/turn", {
      method: "POST", json: { sessionID: session, input },
    });
    return data.turnId;
  }

  /** A turn of tool calls run in the session's sandbox (no model needed). */
  toolCalls(session: string, calls: ToolCall[], opts: { parallel?: boolean } = {}): Promise<string> {
    return this.turn(session, opts.parallel ? { type: "tool_calls", calls, parallel: true } : { type: "tool_calls", calls });
  }

  /** A turn answered by the daemon's model (ConflictError when none is configured). */
  userMessage(session: string, text: string): Promise<string> {
    return this.turn(session, { type: "user_message", text });
  }

  /** The answer to an external tool the running turn waits for. */
  toolResult(session: string, callId: string, output: unknown): Promise<string> {
    return this.turn(session, { type: "tool_result", callId, output });
  }

  /** Stops a turn: its tools are killed, done {stopReason: "canceled"}
   * follows. An ended or unknown turn throws NotFoundError. */
  cancelTurn(turnId: string): Promise<{ ok: boolean; turnId: string; status?: string }> {
    return this.call(`/runtime/turn/${seg(turnId)}/cancel`, { method: "POST" });
  }

  /** The turn's events, from its turn_started to its done (included), read
   * from the session's resumable stream. lastEventId defaults to 0 (the
   * stored events replayed from the start, so a turn already started is
   * followed from its beginning). */
  async *followTurn(session: string, turnId: string, opts: StreamOptions = {}): AsyncGenerator<SandboxEvent, void, undefined> {
    let on = false;
    for await (const ev of this.stream(session, { lastEventId: 0, ...opts })) {
      const tid = ev.data?.turnId;
      if (ev.type === "turn_started" && tid === turnId) on = true;
      if (!on) continue;
      yield ev;
      if (ev.type === "done" && tid === turnId) return;
    }
  }

  /** Follows the turn until its done; its calls, text, error and stop reason typed. */
  async waitTurn(session: string, turnId: string, opts: StreamOptions = {}): Promise<TurnResult> {
    const evs: SandboxEvent[] = [];
    for await (const ev of this.followTurn(session, turnId, opts)) evs.push(ev);
    return turnResult(turnId, evs);
  }

  /** toolCalls then waitTurn. */
  async runToolCalls(session: string, calls: ToolCall[], opts: StreamOptions & { parallel?: boolean } = {}): Promise<TurnResult> {
    return this.waitTurn(session, await this.toolCalls(session, calls, opts), opts);
  }

  /** Starts a session, runs fn with it, stops it (even when fn throws). */
  async withSession<T>(sessionId: string | undefined, fn: (s: Session) => Promise<T>,
                       opts: { tools?: ToolSpec[] } = {}): Promise<T> {
    const st = await this.sessions.start(sessionId, opts);
    const s = new Session(this, st.sessionId ?? sessionId ?? "");
    try {
      return await fn(s);
    } finally {
      await this.sessions.stop(s.id);
    }
  }
}

/** A started session: the client's calls with its session filled in. */
export class Session {
  constructor(readonly client: Sandbox, readonly id: string) {}
  exec(cmd: Command, opts: RunOptions = {}) {
    return this.client.exec(cmd, { ...opts, session: this.id });
  }
  runCode(code: string, opts: RunOptions & { language?: string } = {}) {
    return this.client.runCode(code, { ...opts, session: this.id });
  }
  submit(cmd: Command, opts: RunOptions = {}) {
    return this.client.tasks.submit(cmd, { ...opts, session: this.id });
  }
  network(rules: { default?: "allow" | "deny"; allow?: string[]; deny?: string[] }) {
    return this.client.sessions.network(this.id, rules);
  }
  stream(opts: StreamOptions = {}) {
    return this.client.stream(this.id, opts);
  }
  turn(input: TurnInput) {
    return this.client.turn(this.id, input);
  }
  toolCalls(calls: ToolCall[], opts: { parallel?: boolean } = {}) {
    return this.client.toolCalls(this.id, calls, opts);
  }
  runToolCalls(calls: ToolCall[], opts: StreamOptions & { parallel?: boolean } = {}) {
    return this.client.runToolCalls(this.id, calls, opts);
  }
  toolResult(callId: string, output: unknown) {
    return this.client.toolResult(this.id, callId, output);
  }
  followTurn(turnId: string, opts: StreamOptions = {}) {
    return this.client.followTurn(this.id, turnId, opts);
  }
  waitTurn(turnId: string, opts: StreamOptions = {}) {
    return this.client.waitTurn(this.id, turnId, opts);
  }
  stop() {
    return this.client.sessions.stop(this.id);
  }
}

export class Tasks {
  constructor(private readonly c: Sandbox) {}

  /** Submits a command; answered at once with the pending task. */
  submit(cmd: Command, opts: RunOptions = {}): Promise<Task> {
    return this.c.call("/runtime/tasks", { method: "POST", json: taskBody({ command: command(cmd) }, opts), signal: opts.signal });
  }

  /** Submits code in a language the daemon knows. */
  submitCode(code: string, opts: RunOptions & { language?: string } = {}): Promise<Task> {
    return this.c.call("/runtime/tasks", {
      method: "POST", json: taskBody({ language: opts.language ?? "python", code }, opts), signal: opts.signal,
    });
  }

  /** The task, with its result (outputs included) once it has ended. */
  get(id: string): Promise<Task> {
    return this.c.call(`/runtime/tasks/${seg(id)}`);
  }

  /** One page, newest first; nextCursor ("" at the end) asks for the next. */
  async list(q: { status?: string; limit?: number; cursor?: string; session?: string } = {}): Promise<TaskPage> {
    const data = await this.c.call<TaskPage | Task[]>("/runtime/tasks", {
      query: { status: q.status, limit: q.limit, cursor: q.cursor, sessionID: q.session },
    });
    if (Array.isArray(data)) return { tasks: data, nextCursor: "" }; // the original's bare array
    return { ...data, tasks: data.tasks ?? [], nextCursor: data.nextCursor ?? "" };
  }

  /** Every task, newest first, page after page. */
  async *iterate(q: { status?: string; session?: string; pageSize?: number } = {}): AsyncGenerator<Task, void, undefined> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.list({ status: q.status, session: q.session, limit: q.pageSize ?? 50, cursor });
      yield* page.tasks;
      if (!page.nextCursor || page.tasks.length === 0) return;
      cursor = page.nextCursor;
    }
  }

  /** Cancels a pending or running task (its whole tree); an ended one
   * throws ConflictError. */
  cancel(id: string): Promise<Task> {
    return this.c.call(`/runtime/tasks/${seg(id)}/cancel`, { method: "POST" });
  }

  /** Waits for the task's end; throws TaskTimeoutError after timeoutMs. */
  async wait(id: string, opts: { timeoutMs?: number; pollMs?: number } = {}): Promise<Task> {
    const deadline = opts.timeoutMs === undefined ? Infinity : Date.now() + opts.timeoutMs;
    let pause = opts.pollMs ?? 100;
    for (;;) {
      const t = await this.get(id);
      if (FINAL_STATUSES.has(t.status)) return t;
      const left = deadline - Date.now();
      if (left <= 0) throw new TaskTimeoutError(`task ${id} still ${t.status} after ${opts.timeoutMs} ms`);
      await sleep(Math.min(pause, left));
      pause = Math.min(pause * 1.5, 1000);
    }
  }

  /** Replaces a running task's egress rules (new connections follow at once). */
  setNetwork(id: string, rules: { default?: "allow" | "deny"; allow?: string[]; deny?: string[] }) {
    return this.c.call<{ ok: boolean; taskId: string }>(`/runtime/tasks/${seg(id)}/network`, {
      method: "POST", json: netBody(rules),
    });
  }
}

export class Files {
  constructor(private readonly c: Sandbox) {}

  private async file(path: string): Promise<Response> {
    const res = await this.c.open("/runtime/files", { query: { path } });
    if ((res.headers.get("Content-Type") ?? "").startsWith("application/json")) {
      await res.body?.cancel();
      (res as any)._sbxDone();
      throw new SandboxError(`${path} is a directory (use files.list)`, res.status);
    }
    return res;
  }

  /** A file's content. */
  async get(path: string): Promise<Uint8Array> {
    const res = await this.file(path);
    try {
      return new Uint8Array(await res.arrayBuffer());
    } catch (e) {
      throw connectionError(`GET ${path}`, e);
    } finally {
      (res as any)._sbxDone();
    }
  }

  async getText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.get(path));
  }

  /** A file's content as it arrives, in chunks (never whole in memory). */
  async *download(path: string): AsyncGenerator<Uint8Array, void, undefined> {
    const res = await this.file(path);
    const reader = res.body!.getReader();
    let n = 0;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        n += value.byteLength;
        yield value;
      }
    } catch (e) {
      throw connectionError(`GET ${path}`, e);
    } finally {
      await reader.cancel().catch(() => {});
      (res as any)._sbxDone();
    }
    const len = res.headers.get("Content-Length");
    if (len !== null && Number(len) !== n) throw new ConnectionError(`GET ${path}: ${n} of ${len} bytes came`);
  }

  /** Writes a file. A ReadableStream or an async iterable of bytes (such as
   * fs.createReadStream(...)) is streamed. Parent directories must exist. */
  put(path: string, data: UploadBody, opts: { size?: number } = {}): Promise<Upload> {
    let body: any = data;
    const headers: Record<string, string> = { "Content-Type": "application/octet-stream" };
    if (data && typeof data === "object" && Symbol.asyncIterator in data &&
        typeof (data as any).getReader !== "function") {
      body = asStream(data as AsyncIterable<Uint8Array>);
    }
    if (opts.size !== undefined) headers["Content-Length"] = String(opts.size);
    return this.c.call<Upload>("/runtime/files", { method: "PUT", query: { path }, body, headers, timeoutMs: null })
      .catch((e) => {
        // fetch cannot read an answer the daemon gave before the whole body
        // was sent (a declared size over the quota: 413), only the closing.
        if (e instanceof ConnectionError && body === data && typeof (data as any)?.getReader !== "function") {
          throw new ConnectionError(`${e.message} (the daemon closed the upload early: a size over the workspace quota is refused before any byte is read)`);
        }
        throw e;
      });
  }

  async delete(path: string): Promise<void> {
    await this.c.call("/runtime/files", { method: "DELETE", query: { path } });
  }

  /** A directory's entries. */
  async list(path = "."): Promise<Listing> {
    const data = await this.c.call<Listing>("/runtime/files", { query: { path } });
    if (!data || !Array.isArray((data as any).entries)) throw new SandboxError(`${path} is not a directory`);
    return data;
  }
}

export class Sessions {
  constructor(private readonly c: Sandbox) {}

  /** Starts a session (a new id when none is given); answered once it is set
   * up. tools: external tools its turns may call ({name, description,
   * parameters, external: true}; the caller answers them with toolResult). */
  start(sessionId?: string, opts: { tools?: ToolSpec[] } = {}): Promise<SessionState> {
    const body: Record<string, unknown> = sessionId === undefined ? {} : { sessionID: sessionId };
    if (opts.tools !== undefined) body.tools = opts.tools;
    return this.c.call<SessionState>("/runtime/start", {
      method: "POST", json: body, timeoutMs: null,
    }).then(sessionState);
  }

  stop(sessionId?: string): Promise<SessionState> {
    return this.c.call<SessionState>("/runtime/stop", {
      method: "POST", json: sessionId === undefined ? {} : { sessionID: sessionId },
    }).then(sessionState);
  }

  /** Replaces a live session's egress rules, at once (a tenant token may only narrow). */
  network(sessionId: string, rules: { default?: "allow" | "deny"; allow?: string[]; deny?: string[] }): Promise<SessionState> {
    return this.c.call("/runtime/network", { method: "POST", json: { ...netBody(rules), sessionID: sessionId } });
  }
}

export class Skills {
  constructor(private readonly c: Sandbox) {}

  async list(): Promise<SkillInfo[]> {
    const data = await this.c.call<SkillInfo[] | { skills: SkillInfo[] }>("/runtime/skills");
    return Array.isArray(data) ? data : data?.skills ?? [];
  }

  get(name: string): Promise<SkillInfo> {
    return this.c.call(`/runtime/skills/${seg(name)}`);
  }

  async reload(): Promise<SkillInfo[]> {
    const data = await this.c.call<{ ok: boolean; skills: SkillInfo[] }>("/runtime/skills/reload", { method: "POST" });
    return data?.skills ?? [];
  }

  async activate(name: string, version: string): Promise<SkillInfo> {
    const data = await this.c.call<{ ok: boolean; skill: SkillInfo }>(`/runtime/skills/${seg(name)}/activate`, {
      method: "POST", json: { version },
    });
    return data.skill;
  }

  /** Submits a task running a skill's action ({skill, action, args}, as
   * claw-skill NAME ACTION ARGS...); answered at once with the pending task. */
  run(name: string, action: string, args: string[] = [], opts: RunOptions = {}): Promise<Task> {
    return this.c.call("/runtime/tasks", {
      method: "POST", json: taskBody({ skill: name, action, args }, opts), signal: opts.signal,
    });
  }

  /** Runs a skill's action and waits for its end (POST /runtime/exec). */
  exec(name: string, action: string, args: string[] = [], opts: RunOptions = {}): Promise<ExecResult> {
    return this.c.runSkill(taskBody({ skill: name, action, args }, opts), opts);
  }
}
