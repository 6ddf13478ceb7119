// Time from OpenSandbox's Sandbox.create to its first command's first output
// line, through the unchanged @alibaba-group/opensandbox SDK against sandboxd
// (bench/opensandbox.sh runs it). DOMAIN, KEY, RUNS from the environment;
// prints one JSON object: the figures in ms.
import { ConnectionConfig, Sandbox } from "@alibaba-group/opensandbox";

const cfg = new ConnectionConfig({ domain: process.env.DOMAIN, apiKey: process.env.KEY });
const runs = Number(process.env.RUNS || 30);
const created = [], first = [];
for (let i = 0; i < runs + 3; i++) {
  const t0 = performance.now();
  const sbx = await Sandbox.create({
    image: "shell", connectionConfig: cfg, timeoutSeconds: 600,
    resource: { cpu: "1", memory: "256Mi" },
  });
  const t1 = performance.now();
  let t2 = 0;
  await sbx.commands.run("echo hi", {}, { onStdout: () => { if (!t2) t2 = performance.now(); } });
  if (!t2) throw new Error("no output");
  if (i >= 3) { // the first three warm Node's connection pool and the daemon up
    created.push(t1 - t0);
    first.push(t2 - t0);
  }
  await sbx.kill();
  await sbx.close();
}
const q = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const r = (v) => Math.round(v * 10) / 10;
console.log(JSON.stringify({
  runs,
  create: { median: r(q(created, 0.5)), p90: r(q(created, 0.9)), min: r(Math.min(...created)) },
  firstOutput: { median: r(q(first, 0.5)), p90: r(q(first, 0.9)), min: r(Math.min(...first)) },
}));
