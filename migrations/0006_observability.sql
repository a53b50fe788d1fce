-- Sandbox schema, version 6: observability. The NATS publisher's cursor,
-- operation timestamps for latency, and indexes for the events API and for
-- retention.

-- One row: how far the NATS publisher has got. NULL means it never ran: it
-- then starts at the newest event instead of flooding NATS with history.
-- Whoever holds the publisher advisory lock is the only writer.
CREATE TABLE event_publisher (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_event_id  bigint,
    skipped        bigint NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO event_publisher DEFAULT VALUES;

-- When an operation was leased (last) and when its worker started it: the
-- stages of the operation latency histograms.
ALTER TABLE operations ADD COLUMN leased_at timestamptz;
ALTER TABLE operations ADD COLUMN started_at timestamptz;

-- The events API reads one tenant's events after a cursor.
CREATE INDEX events_tenant ON events (tenant_id, id);
-- Retention prunes by age, in batches.
CREATE INDEX events_ts ON events (ts);
CREATE INDEX operations_finished ON operations (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX sandboxes_deleted ON sandboxes (deleted_at) WHERE deleted_at IS NOT NULL;
