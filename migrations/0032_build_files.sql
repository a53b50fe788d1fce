-- Files a template build copies in (issue 32: COPY in a build the server
-- drives; E2B's Template.copy uploads them by hash before it triggers the
-- build). A tenant's, named by the client's hash of them (E2B: sha256 of the
-- COPY and its files); the bytes (a tar, maybe gzipped) kept as standard
-- base64, as an exec's stdin_b64 takes them: a COPY step is an exec that
-- unpacks them in the build sandbox. Bounded per file and per tenant
-- (common/limits.h); unused for a day, pruned.
CREATE TABLE build_files (
    tenant_id   text NOT NULL REFERENCES tenants(id),
    hash        text NOT NULL,
    data_b64    text NOT NULL,
    size_bytes  integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    used_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, hash)
);
CREATE INDEX build_files_used ON build_files (used_at);
