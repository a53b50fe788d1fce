-- Secrets at egress (issue 33, docs/network.md#secrets-at-egress): a
-- tenant's header value bound to hosts, sealed with the controllers' key
-- (secrets_key_file: XChaCha20-Poly1305 with the tenant id and the name as
-- associated data, so a sealed value cannot be moved to another row), never
-- returned by the API. A create's secrets go to its worker in the create's
-- assignment only.
CREATE TABLE secrets (
    tenant_id  text NOT NULL REFERENCES tenants(id),
    name       text NOT NULL,
    header     text NOT NULL,
    hosts      jsonb NOT NULL,
    nonce      bytea NOT NULL,
    sealed     bytea NOT NULL,
    created_by text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);
