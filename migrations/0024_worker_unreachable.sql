-- A worker that stops heartbeating is first unreachable (issue 29): nothing
-- new is placed on it, its sandboxes keep their capacity and stay running
-- (shown unreachable), and only after worker_lost_after_seconds of silence
-- is it lost. A worker that stops on purpose says so (reason 'restarting').
-- resume_state is the state it returns to when heard again (a drain asked
-- while it was away, or before, is kept).
ALTER TABLE workers DROP CONSTRAINT workers_state_check;
ALTER TABLE workers ADD CONSTRAINT workers_state_check
    CHECK (state IN ('ready', 'draining', 'unreachable', 'lost'));
ALTER TABLE workers ADD COLUMN unreachable_since timestamptz;
ALTER TABLE workers ADD COLUMN unreachable_reason text;
ALTER TABLE workers ADD COLUMN lost_at timestamptz;
ALTER TABLE workers ADD COLUMN resume_state text CHECK (resume_state IN ('ready', 'draining'));
