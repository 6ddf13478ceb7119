// Type-checked (tsc --noEmit) by test_sdk_typescript.py against the compiled
// package's shipped .d.ts: the SDK's results are typed, not `any`, and
// misuse is a compile error.
import {
  Sandbox, type ExecResult, type SandboxEvent, type Task, type TaskPage, NotFoundError, SandboxError,
  type TurnResult, type SkillInfo, toolCall,
} from "@sandbox/sdk";

export async function typed(sbx: Sandbox): Promise<number> {
  const r: ExecResult = await sbx.exec(["echo", "hi"], { timeoutSeconds: 5, env: { A: "1" } });
  const code: number = r.exitCode;
  const page: TaskPage = await sbx.tasks.list({ limit: 2 });
  const first: Task | undefined = page.tasks[0];
  const cursor: string = page.nextCursor;
  for await (const ev of sbx.stream("s1", { lastEventId: 0 })) {
    const e: SandboxEvent = ev;
    const id: number | null = e.id;
    if (id !== null && e.type === "exec_finished") break;
  }
  const bytes: Uint8Array = await sbx.files.get("a.txt");
  try {
    await sbx.tasks.get("x");
  } catch (err) {
    if (err instanceof NotFoundError) {
      const s: number = err.status;
      const c: string = err.code;
      return s + c.length;
    }
    if (err instanceof SandboxError) return err.status;
  }
  const tr: TurnResult = await sbx.runToolCalls("s1", [toolCall("exec", { command: "ls" })]);
  const res: string = tr.calls[0].result;
  const tid: string = await sbx.turn("s1", { type: "user_message", text: "hi" });
  const sk: SkillInfo = await sbx.skills.activate("x", "v2");
  // @ts-expect-error a turn's input has a known type
  await sbx.turn("s1", { type: "chat", text: "hi" });
  // @ts-expect-error skills.run takes its args as an array
  await sbx.skills.run("x", "a", "b");
  // @ts-expect-error exitCode is a number
  const wrong: string = r.exitCode;
  // @ts-expect-error a command is a string or an array of strings
  await sbx.exec(42);
  // @ts-expect-error unknown option names are refused
  await sbx.runCode("x", { languag: "python" });
  // @ts-expect-error tasks.list takes its query as an object
  await sbx.tasks.list("failed");
  return code + (first ? 1 : 0) + cursor.length + bytes.length + wrong.length + res.length +
    tid.length + sk.name.length;
}
