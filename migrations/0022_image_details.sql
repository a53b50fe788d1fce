-- What each worker knows of its local images beyond their names (GET
-- /v1/images: size and created): {"repo:tag":{"size":BYTES,"created":UNIX}},
-- sent by the worker when it registers and whenever it changes.
ALTER TABLE workers ADD COLUMN image_details jsonb NOT NULL DEFAULT '{}'::jsonb;
