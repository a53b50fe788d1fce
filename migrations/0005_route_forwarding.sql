-- Sandbox schema, version 5: the route data path.

-- Where the controller reaches a worker's route listener (host:port), and
-- the API token the worker registered with: route grants are signed with a
-- key derived from that token's stored hash (common/grant.h), which the
-- worker derives from the token it holds.
ALTER TABLE workers ADD COLUMN route_address text;
ALTER TABLE workers ADD COLUMN token_id text REFERENCES api_tokens(id);
