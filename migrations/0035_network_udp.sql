-- UDP flows in the network log (issue 33, docs/network.md): the egress
-- filter records each UDP flow it relays or refuses, kind 'udp'.
ALTER TABLE network_log DROP CONSTRAINT network_log_kind_check;
ALTER TABLE network_log ADD CONSTRAINT network_log_kind CHECK (kind IN ('dns', 'tcp', 'udp'));
