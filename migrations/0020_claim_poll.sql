-- The poll that handed an operation out (issue 28's CI run: an exec failed
-- worker_lost, never having run). A poll's claim moves what it hands out to
-- 'running' in the claim's own transaction; when its answer never reaches
-- the worker (the controller killed between the commit and the write, the
-- connection cut), the worker never starts it, holds nothing, and the lease
-- expires: a create was retried, an exec failed, not being safe to repeat.
-- Each poll now carries an id the worker made; the claim writes it here,
-- and a worker that got no answer to a poll says so in its next one, which
-- hands those operations out again (running -> leased) before it claims.
ALTER TABLE operations ADD COLUMN claim_poll text;
