-- Sandbox schema, version 12: a worker that is stopping says so.

-- Set by the heartbeat a worker sends when it begins a graceful stop
-- (SIGTERM), cleared when a worker of that name registers again. While it
-- is set nothing new is placed on the worker, and its leases of operations
-- it has not started are expired at once (re-placed by the lease pass)
-- instead of waiting out lease_seconds on a process that is going away.
ALTER TABLE workers ADD COLUMN stopping_at timestamptz;
