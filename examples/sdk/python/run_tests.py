#!/usr/bin/env python3
"""Runs a project's tests in a disposable sandbox with the Python SDK:
create a sandbox for untrusted code (restricted network), upload the
project, run its tests with their output shown as it comes, fetch the
report, delete the sandbox (also when something fails).

    export SANDBOX_URL=http://127.0.0.1:8080 SANDBOX_TOKEN=sbt_...
    PYTHONPATH=client/python python3 examples/sdk/python/run_tests.py [PROJECT_DIR]

PROJECT_DIR defaults to the sample project next to this file (busybox sh
only: the default image has no python); its tests are `tests/run.sh`,
which writes report/. SANDBOX_IMAGE picks another image than the server's
default. Exits with the tests' exit code (1 when the sandbox part fails).
"""

import os
import sys
import tempfile

from sandbox_client import Client, SandboxError


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    project = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "sample_project")
    client = Client()  # SANDBOX_URL / SANDBOX_TOKEN / SANDBOX_CA_FILE, or the CLI's config file

    # Untrusted code (a repository we did not write, tests it generated):
    # the server classifies it and hardens the sandbox; restricted network.
    with client.sandboxes.create(
        os.environ.get("SANDBOX_IMAGE"),
        network="restricted",
        trust={"untrusted_repo": True, "generated_code": True},
        cpu_millis=500,
        memory_mib=256,
        ttl_seconds=900,
        labels={"purpose": "run-tests"},
    ) as sbx:
        print(f"sandbox {sbx.id}: {sbx.data['classification']['trust']}, isolation {sbx.data['isolation']}",
              file=sys.stderr)
        sbx.upload(project, "/work/project")

        stream = sbx.exec(["sh", "tests/run.sh"], cwd="/work/project", timeout=600, stream=True)
        for chunk in stream:
            out = sys.stdout if chunk.stream == "stdout" else sys.stderr
            out.buffer.write(chunk.data)
            out.flush()
        result = stream.result
        print(f"tests exited {result.exit_code} in {result.duration_ms} ms", file=sys.stderr)

        with tempfile.TemporaryDirectory() as tmp:
            sbx.download("/work/project/report", tmp)
            with open(os.path.join(tmp, "report", "summary.txt")) as f:
                print("report: " + f.read().strip(), file=sys.stderr)
            with open(os.path.join(tmp, "report", "junit.xml")) as f:
                junit = f.read()
            print(f"junit.xml: {len(junit)} bytes", file=sys.stderr)
    # leaving the `with` block deleted the sandbox
    return result.exit_code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SandboxError as e:
        print(f"run_tests: {e}", file=sys.stderr)
        sys.exit(1)
