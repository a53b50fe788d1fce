-- Sandbox schema, version 9: a worker token acts for exactly one worker.
--
-- api_tokens.worker_name: the worker name a worker token may register and
-- act as. Set when the token is made (sandboxd token create --worker NAME,
-- POST /v1/tokens {"worker": NAME}) or, for a token made without one
-- (every token from before this version), at its first registration; once
-- set it never changes. NULL: not bound yet. Only worker tokens have one.
ALTER TABLE api_tokens ADD COLUMN worker_name text;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_worker_name_role
    CHECK (worker_name IS NULL OR role = 'worker');
CREATE INDEX api_tokens_worker_name ON api_tokens (worker_name) WHERE worker_name IS NOT NULL;
