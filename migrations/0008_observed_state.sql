-- Sandbox schema, version 8: what the runtime observed of a sandbox that
-- stopped running without being asked to.
--
-- failure: NULL while nothing went wrong; otherwise
--   {"reason": "exited" | "oom_killed" | "removed" | ...,
--    "exit_code": N (when the runtime knows it),
--    "message": "one line for people",
--    "at": RFC 3339 time the controller learnt it}
-- set in the same transaction as the phase change to failed and its event.
-- output_tail: the last bytes (limits.h SBX_OUTPUT_TAIL_MAX) of the main
-- process's stdout and stderr as the runtime kept them, UTF-8 repaired; what
-- `sandbox logs` shows once the container is gone.
ALTER TABLE sandboxes ADD COLUMN failure jsonb;
ALTER TABLE sandboxes ADD COLUMN output_tail text;
