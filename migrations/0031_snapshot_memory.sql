-- A microvm snapshot that saved its VM's memory too (issue 32: sandbox
-- snapshot --memory, and fork on microvm): a sandbox from it resumes the
-- saved machine, its processes running, where the worker can.
ALTER TABLE snapshots ADD COLUMN memory boolean NOT NULL DEFAULT false;
