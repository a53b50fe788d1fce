-- Volumes (issue 32): a tenant's file system that outlives its sandboxes.
-- A volume lives on one worker: the first sandbox that mounts it places it
-- (worker_id is set then), and every later one goes where it is. Its bytes
-- are an ext4 image of size_mib on that worker. Which sandboxes mount it is
-- read from their specs ("volumes"), so nothing else records it. A delete
-- marks the row; the worker's next heartbeat, which lists the volumes it
-- holds, is answered with those no live row wants there, and removes them.
CREATE TABLE volumes (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants(id),
    name        text NOT NULL,
    size_mib    bigint NOT NULL CHECK (size_mib > 0),
    worker_id   text REFERENCES workers(id),
    created_by  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    placed_at   timestamptz,
    deleted_at  timestamptz
);
CREATE UNIQUE INDEX volumes_name ON volumes (tenant_id, name) WHERE deleted_at IS NULL;
CREATE INDEX volumes_worker ON volumes (worker_id) WHERE deleted_at IS NULL;
-- Whether the worker can hold volumes (root, loop devices, mkfs.ext4: its
-- heartbeat says so); placement sends a sandbox with volumes only there.
ALTER TABLE workers ADD COLUMN volumes boolean NOT NULL DEFAULT false;
