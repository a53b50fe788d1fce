-- Egress by domain (issue 33, docs/network.md).
--
-- A live change of a sandbox's egress rules: an operation of kind
-- 'network' leased to the worker the sandbox is on, whose request holds the
-- new rules; its success writes them into the sandbox's spec.
ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check
    CHECK (kind IN ('create', 'delete', 'exec', 'share', 'unshare', 'extend', 'snapshot', 'pause', 'resume',
                    'snapshot_copy', 'network'));

-- What a worker's egress filter decided for a sandbox: each DNS query and
-- each TCP connection, allowed or refused, with the name, the address and
-- port, the rule or reason and, for a connection it relayed, the bytes each
-- way. The worker reports them; the controller keeps the newest of each
-- sandbox (a bound per sandbox) and drops them with the sandbox's row.
CREATE TABLE network_log (
    id         bigserial PRIMARY KEY,
    tenant_id  text NOT NULL,
    sandbox_id text NOT NULL,
    at         timestamptz NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('dns', 'tcp')),
    verdict    text NOT NULL CHECK (verdict IN ('allowed', 'refused')),
    name       text NOT NULL,
    addr       text,
    port       integer,
    why        text NOT NULL,
    bytes_out  bigint,
    bytes_in   bigint
);
CREATE INDEX network_log_sandbox ON network_log (sandbox_id, id);
