// Kubernetes manifests checked offline with the npm package kubernetes-models
// (scripts/npm-deps.sh, its "deploy" folder), for test_deploy_k8s.py:
//   node deploy_k8s_check.mjs tojson FILE...   every YAML document, as one JSON array
//   node deploy_k8s_check.mjs check TSC FILE...
//     every document against its kind's model: validate() (required fields,
//     types, formats of the API's schema), then the TypeScript compiler TSC
//     on the documents typed with the models' interfaces, whose excess
//     property checks find a field the API does not have (a misspelt key,
//     which validate() lets through). Prints {"docs": [...], "errors": [...]}.
// Run by Node 24 with NODE_PATH unused: the modules are found through a
// node_modules link made beside the generated TypeScript file.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

const modules = process.env.SBX_DEPLOY_MODULES;
const require = createRequire(path.join(modules, "noop.js"));
const YAML = require("yaml");

function documents(files) {
  const docs = [];
  const errors = [];
  for (const file of files) {
    for (const d of YAML.parseAllDocuments(fs.readFileSync(file, "utf8"))) {
      for (const e of d.errors) errors.push(`${file}: YAML: ${e.message}`);
      const v = d.toJSON();
      if (v !== null && v !== undefined) docs.push({ file, doc: v });
    }
  }
  return { docs, errors };
}

// apiVersion "v1" -> "kubernetes-models/v1/Kind", "apps/v1" -> "kubernetes-models/apps/v1/Kind"
function modelPath(doc) {
  return `kubernetes-models/${doc.apiVersion}/${doc.kind}`;
}

async function check(tsc, files) {
  const { docs, errors } = documents(files);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sbx-k8s-check-"));
  try {
    fs.symlinkSync(modules, path.join(dir, "node_modules"));
    let ts = "";
    for (const [i, { file, doc }] of docs.entries()) {
      const where = `${file}: ${doc.kind || "?"} ${(doc.metadata || {}).name || "?"}`;
      if (typeof doc.apiVersion !== "string" || typeof doc.kind !== "string") {
        errors.push(`${where}: no apiVersion or kind`);
        continue;
      }
      let mod;
      try {
        mod = await import(path.join(modules, modelPath(doc) + ".js"));
      } catch (e) {
        errors.push(`${where}: no model for ${doc.apiVersion} ${doc.kind}`);
        continue;
      }
      try {
        new mod[doc.kind](doc).validate();
      } catch (e) {
        errors.push(`${where}: ${e.message}`);
      }
      ts += `import type { I${doc.kind} as T${i} } from "${modelPath(doc)}";\n`;
      ts += `// ${where}\nexport const d${i}: T${i} = ${JSON.stringify(doc, null, 2)};\n`;
    }
    fs.writeFileSync(path.join(dir, "manifests.ts"), ts);
    try {
      execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--skipLibCheck",
        "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022",
        path.join(dir, "manifests.ts")], { cwd: dir, encoding: "utf8" });
    } catch (e) {
      const out = (e.stdout || "") + (e.stderr || "");
      for (const line of out.split("\n"))
        if (line.includes("error TS")) errors.push(`types: ${line.replace(dir + "/", "")}`);
      if (!out.includes("error TS")) errors.push(`tsc failed: ${out || e.message}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return { docs: docs.map((d) => d.doc), errors };
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "tojson") {
  const { docs, errors } = documents(args);
  if (errors.length) {
    console.error(errors.join("\n"));
    process.exit(1);
  }
  console.log(JSON.stringify(docs.map((d) => d.doc)));
} else if (cmd === "check") {
  console.log(JSON.stringify(await check(args[0], args.slice(1))));
} else {
  console.error("usage: deploy_k8s_check.mjs tojson FILE... | check TSC FILE...");
  process.exit(2);
}
