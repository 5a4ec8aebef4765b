-- A sandbox's Docker objects are named after the sandbox, not the user: a
-- sandbox claimed from the warm pool keeps the pool name it was made with.
ALTER TABLE sandboxes ADD COLUMN name text;
UPDATE sandboxes SET name = user_id;
ALTER TABLE sandboxes ALTER COLUMN name SET NOT NULL;
ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_name_key UNIQUE (name);

-- Warm-pool sandboxes: made ahead of need, belonging to nobody. A claim
-- moves one row to sandboxes in one transaction, so a sandbox is in exactly
-- one of the two tables and never bound to two users.
CREATE TABLE pool_sandboxes (
    name         text PRIMARY KEY,
    state        text NOT NULL CHECK (state IN ('provisioning', 'ready')),
    subnet       cidr NOT NULL UNIQUE,
    image        text NOT NULL DEFAULT '',
    container_id text NOT NULL DEFAULT '',
    network_id   text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pool_sandboxes_ready ON pool_sandboxes (created_at) WHERE state = 'ready';
