#!/usr/bin/env node
// Runs a project's test suite in a disposable sandbox with @sandbox/client:
// create it (restricted network, classified untrusted: the code is not
// ours), upload the project, run its tests with the output streamed as it
// comes, fetch the report, delete the sandbox.
//
//   cd examples/sdk/typescript && npm install      # links the SDK built in client/typescript
//   SANDBOX_URL=… SANDBOX_TOKEN=… node run-tests.mjs [PROJECT_DIR]
//
// The settings come as the CLI's do (SANDBOX_URL, SANDBOX_TOKEN,
// SANDBOX_CA_FILE, or ~/.config/sandbox/config). PROJECT_DIR defaults to
// ./project, whose tests/run.sh is a shell-script suite (the base image has
// only busybox). SANDBOX_IMAGE picks another image. Exit code: the suite's.

import { writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Client, SandboxError } from "@sandbox/client";

const project = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), "project"));
const client = new Client();

let sbx;
try {
  sbx = await client.sandboxes.create({
    image: process.env.SANDBOX_IMAGE, // undefined: the server's default image
    network: "restricted",
    trust: { untrustedRepo: true, generatedCode: true },
    memoryMib: 128,
    cpuMillis: 500,
    ttlSeconds: 900, // a safety net: deleted by the controller even if this script dies
    labels: { purpose: "sdk-example" },
  });
  console.log(`created ${sbx.id} (${sbx.data.classification?.trust ?? "?"}, isolation ${sbx.data.isolation})`);
} catch (e) {
  console.error(`cannot create the sandbox: ${e instanceof SandboxError ? `${e.code}: ${e.message}` : e}`);
  process.exit(3);
}

let exitCode = 1;
try {
  const up = await sbx.upload(project, "/work/project");
  console.log(`uploaded ${project} (${up.bytes} bytes of tar) to /work/project`);

  const run = await sbx.exec(["sh", "tests/run.sh"], { stream: true, cwd: "/work/project", timeout: 600 });
  for await (const chunk of run) {
    (chunk.stream === "stderr" ? process.stderr : process.stdout).write(chunk.data);
  }
  exitCode = run.result.exitCode;
  console.log(`the test suite exited ${exitCode} after ${run.result.durationMs} ms`);

  const report = await sbx.files.read("/work/project/report.txt");
  writeFileSync("report.txt", report);
  console.log(`report.txt: ${new TextDecoder().decode(report).trim()}`);
} catch (e) {
  console.error(`the run failed: ${e instanceof SandboxError ? `${e.code}: ${e.message}` : e}`);
  exitCode = 3;
} finally {
  await sbx.delete();
  console.log(`deleted ${sbx.id}`);
}
process.exit(exitCode);
